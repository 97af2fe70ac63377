r"""The received rows are labelled expert-major (all ranks' rows for expert 0 first), but arrive rank-major.

EXPECT: ExpertParallelMoE.*forward/output.*(rank|split)
CLASS: values
WORLD_SIZES: 2 3
ONLY: ExpertParallelMoE
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        local = torch.arange(self.num_local, device=x.device).repeat(world)
        local = local.repeat_interleave(received.reshape(-1))         # each row's local expert
''',
         r'''        local = torch.arange(self.num_local, device=x.device)
        local = local.repeat_interleave(received.sum(0))
'''),
    ],
}
