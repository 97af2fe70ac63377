r"""The layer gathers every rank's counts with an all-gather instead of exchange_splits'
all-to-all: the right numbers, but a collective the rule does not allow (each rank receives
N x N counts where it needs N).

EXPECT: ExpertParallelMoE .*phase forward: rank \d, forward: 1 call\(s\) other than all_to_all, expected exactly 0; seen: all_gather_into_tensor at experts\.py:\d+ in forward.*rule 'Communication': forward makes all-to-alls only
CLASS: traffic
WORLD_SIZES: 2 4
ONLY: ExpertParallelMoE
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        received = exchange_splits(counts, self.group)                 # [N, local]
''',
         r'''        gathered = counts.new_empty((world * world, self.num_local))
        dist.all_gather_into_tensor(gathered, counts.contiguous(), group=self.group)
        me = dist.get_rank(self.group)
        received = gathered.view(world, world, self.num_local)[:, me].clone()
'''),
    ],
}
