r"""Backward indexes the shard in hand as (r - k) % N like forward, but weights now rotate counterclockwise (right only for N <= 2).

EXPECT: flyweight\.Linear .*backward/grad input 0 max abs error.*holds shard \(r \+ k\) % N
WORLD_SIZES: 3
ONLY: Linear

A wrong implementation: solutions/flyweight.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
REPLACE = [
    (r'''            s = (rank + k) % world
''',
     r'''            s = (rank - k) % world
'''),
]
