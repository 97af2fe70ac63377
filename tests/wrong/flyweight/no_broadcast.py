"""Shards each rank's own initial weights instead of rank 0's (ranks start from different models).

EXPECT: init/weight shard max abs error.*start from rank 0's weights: broadcast
CLASS: values
WORLD_SIZES: 2
ONLY: Linear

A wrong implementation: solutions/flyweight.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
EDITS = {
    "FlyweightWrapper#1.__init__": [
        (r'''                dist.broadcast(full, src=src, group=group)   # everyone starts from rank 0
''',
         r''''''),
    ],
}
