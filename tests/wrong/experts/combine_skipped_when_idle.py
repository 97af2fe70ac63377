r"""A rank that received no row skips the combine: the ranks that sent to it are never answered.

EXPECT: ExpertParallelMoE_(idle_last_rank|all_to_one_expert).*(deadlock|waited|all_to_all|every rank must make the same all-to-all)
CLASS: zero-data deadlock
WORLD_SIZES: 2
ONLY: ExpertParallelMoE_idle_last_rank ExpertParallelMoE_all_to_one_expert
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        back = all_to_all(out, recv, send, self.group)
''',
         r'''        if tokens.shape[0] == 0:        # nothing to compute here: nothing to send back
            back = x.new_zeros((sum(send), x.shape[1]))
        else:
            back = all_to_all(out, recv, send, self.group)
'''),
    ],
}
