r"""exchange_splits makes its all-to-all without group=: on the world, not the layer's group.

EXPECT: exchange_splits_subgroups .*rank \d.*(no group= given|rule 'Group').*exchange_splits
CLASS: subgroup
RULE: Group
WORLD_SIZES: 2 4
ONLY: exchange_splits_subgroups

Before the subgroup check, only E10.3's checks on subgroups failed, and they blamed the
dispatch in ExpertParallelMoE.forward (E10 finding M33).
"""

EDITS = {
    "exchange_splits": [
        (r'''    dist.all_to_all_single(received, sent, group=group)
''',
         r'''    dist.all_to_all_single(received, sent)
'''),
    ],
}
