r"""ExpertParallelMoE does not check that N divides E: 10 experts over 3 ranks leave expert 9 out.

EXPECT: ExpertParallelMoE_experts_not_divisible.*rule 'Raises'
CLASS: values
RULE: Raises
WORLD_SIZES: 3
"""

EDITS = {
    "ExpertParallelMoE.__init__": [
        (r'''        if moe.num_experts % world:
            raise ValueError(f"ExpertParallelMoE: {moe.num_experts} experts do not split over "
                             f"{world} ranks")
''',
         r'''        # every rank takes E // N experts
'''),
    ],
}
