r"""Backward indexes the shard in hand as (r - k) % N like forward, but weights now rotate counterclockwise (right only for N <= 2).

EXPECT: flyweight\.Linear .*backward/grad input 0 max abs error.*holds shard \(r \+ k\) % N
CLASS: 3-4-ranks direction
WORLD_SIZES: 3
ONLY: Linear

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
BASE = "simple"
EDITS = {
    "FlyweightWrapper._rotating_backward": [
        (r'''            s = (rank + k) % world
''',
         r'''            s = (rank - k) % world
'''),
    ],
}
