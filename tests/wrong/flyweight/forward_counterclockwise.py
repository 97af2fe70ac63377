r"""Rotates counterclockwise in forward while indexing the shards as if they came clockwise.

EXPECT: flyweight\.Linear .*forward/output max abs error.*CLOCKWISE, from rank r-1
CLASS: 3-4-ranks direction
WORLD_SIZES: 3
ONLY: Linear

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "FlyweightWrapper._rotating_forward": [
        (r'''                incoming = rotation.rotate_async(shard, "clockwise", self.group,
''',
         r'''                incoming = rotation.rotate_async(shard, "counterclockwise", self.group,
'''),
    ],
}
