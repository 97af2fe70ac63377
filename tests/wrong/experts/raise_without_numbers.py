r"""ExpertParallelMoE raises ValueError when N does not divide E, but names neither number.

EXPECT: ExpertParallelMoE_experts_not_divisible.*rank \d, init/ExpertParallelMoE of 10 experts over this group raises is "ValueError\('experts must divide evenly over the ranks'\), which does not name 10 and 3".*rule 'Raises'
CLASS: values
WORLD_SIZES: 3
ONLY: ExpertParallelMoE_experts_not_divisible

The rule says "raises ValueError naming both numbers" (E10 finding M48).
"""

EDITS = {
    "ExpertParallelMoE.__init__": [
        (r'''            raise ValueError(f"ExpertParallelMoE: {moe.num_experts} experts do not split over "
                             f"{world} ranks")
''',
         r'''            raise ValueError("experts must divide evenly over the ranks")
'''),
    ],
}
