r"""AllToAll.backward's all-to-all forgets group=: the reverse exchange runs on the world.

EXPECT: AllToAll_subgroups .*phase backward: rank \d.*no group= given.*in backward.*rule 'Group'
CLASS: subgroup
WORLD_SIZES: 2 4
ONLY: AllToAll_subgroups
"""

EDITS = {
    "AllToAll.backward": [
        (r'''                               group=ctx.group)
''',
         r'''                               )              # the group stayed on ctx, unused
'''),
    ],
}
