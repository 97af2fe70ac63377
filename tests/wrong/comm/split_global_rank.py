"""Split uses the global rank instead of the rank within `group` (only wrong with subgroups).

EXPECT: subgroups
CLASS: subgroup
WORLD_SIZES: 4
RULE: Group
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "Split.forward": [
        (r'''    def forward(ctx, x, dim=-1, group=None):
        world, rank = _world(group)
        if x.shape[dim] % world:
''',
         r'''    def forward(ctx, x, dim=-1, group=None):
        world, rank = dist.get_world_size(group), dist.get_rank()
        if x.shape[dim] % world:
'''),
    ],
}
