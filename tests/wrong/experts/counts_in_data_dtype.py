r"""The counts are built in the data's dtype (float64): torch's repeat_interleave refuses them.

EXPECT: ERROR +\[E10\.2\] experts\.ExpertParallelMoE .*raised NotImplementedError: "repeat_interleave_cpu" not implemented for 'Double'.*in forward
CLASS: dtype
WORLD_SIZES: 1 2
ONLY: ExpertParallelMoE

torch's own NotImplementedError, raised by an operator the student's line calls, is an error
of that line, not the stub's "not implemented yet" (E10 finding M49).
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        counts = torch.bincount(r.expert[t, j], minlength=self.num_experts)
''',
         r'''        e = r.expert[t, j]
        counts = probs.new_zeros(self.num_experts).index_add(
            0, e, torch.ones_like(e, dtype=probs.dtype))
'''),
        (r'''        send, recv = counts.sum(1).tolist(), received.sum(1).tolist()
''',
         r'''        send = [int(v) for v in counts.sum(1).tolist()]
        recv = [int(v) for v in received.sum(1).tolist()]
'''),
    ],
}
