r"""Forward step i computes with shard (r - i - 1) % N: off by one (the shard in hand is (r - i) % N).

EXPECT: flyweight\.Linear .*forward/output max abs error.*forward step i computes with shard s = \(r - i\) % N
CLASS: off-by-one
WORLD_SIZES: 2
ONLY: Linear

A wrong implementation: solutions/flyweight.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
REPLACE = [
    (r'''            s = (rank - i) % world
''',
     r'''            s = (rank - i - 1) % world
'''),
]
