r"""A rank with no row to send returns zeros at once: it skips the all-to-alls its peers make.

EXPECT: ExpertParallelMoE_rank_without_tokens .*rank 1.*rank 1 has no token here.*ExpertParallelMoE.forward still makes every all-to-all
CLASS: zero-data deadlock
WORLD_SIZES: 2 3
ONLY: ExpertParallelMoE_rank_without_tokens

On NCCL its peers would wait forever in the dispatch (E10 finding M46).
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        tokens = all_to_all(x[t], send, recv, self.group)
''',
         r'''        if sum(send) == 0:                      # nothing of mine to route
            return (x.new_zeros(x.shape).reshape(shape),
                    serial.load_balancing_loss(probs, r.expert))
        tokens = all_to_all(x[t], send, recv, self.group)
'''),
    ],
}
