r"""Capacity is computed from the tokens of all ranks (T*N), so fewer tokens are dropped than serially.

EXPECT: ExpertParallelMoE_top2_overflow.*capacity from THIS rank's token count
CLASS: values
WORLD_SIZES: 2
ONLY: ExpertParallelMoE_top2_overflow
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        cap = serial.capacity(x.shape[0], self.num_experts, self.top_k, self.capacity_factor)
''',
         r'''        cap = serial.capacity(x.shape[0] * world, self.num_experts, self.top_k,
                              self.capacity_factor)
'''),
    ],
}
