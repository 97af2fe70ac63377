"""Takes the shard index from the world rank (dist.get_rank()) instead of the rank in `group`.

EXPECT: Linear_subgroup.*GROUP rank and size
CLASS: subgroup
WORLD_SIZES: 3
ONLY: Linear_subgroup
RULE: Group

A wrong implementation: solutions/flyweight.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
EDITS = {
    "FlyweightWrapper#1.__init__": [
        (r'''        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
''',
         r'''        self.world, self.rank = dist.get_world_size(group), dist.get_rank()
'''),
    ],
}
