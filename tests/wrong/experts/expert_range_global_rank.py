r"""The layer takes its experts by the GLOBAL rank (dist.get_rank()), not the rank in its group.

EXPECT: sync_gradients_subgroups.*rank \d, init/expert \d+.*rule 'Group'
CLASS: subgroup 3-4-ranks
RULE: Group
WORLD_SIZES: 4
"""

EDITS = {
    "ExpertParallelMoE.__init__": [
        (r'''        self.first = rank * self.num_local
''',
         r'''        self.first = dist.get_rank() * self.num_local % self.num_experts
'''),
    ],
}
