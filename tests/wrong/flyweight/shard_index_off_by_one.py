r"""Forward step i computes with shard (r - i - 1) % N: off by one (the shard in hand is (r - i) % N).

EXPECT: flyweight\.Linear .*forward/output max abs error.*forward step i computes with shard s = \(r - i\) % N
CLASS: off-by-one
WORLD_SIZES: 2
ONLY: Linear

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "FlyweightWrapper._rotating_forward": [
        (r'''            s = (rank - i) % world
''',
         r'''            s = (rank - i - 1) % world
'''),
    ],
}
