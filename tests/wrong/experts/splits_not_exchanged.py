r"""The split sizes are not exchanged: each rank expects to receive as many rows as it sends.

EXPECT: ExpertParallelMoE.*rank \d.*all_to_all.*exchange the split sizes first
CLASS: values deadlock
WORLD_SIZES: 2 3
ONLY: ExpertParallelMoE ExpertParallelMoE_top2_overflow
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        received = exchange_splits(counts, self.group)                 # [N, local]
''',
         r'''        received = counts                       # "everyone sends about the same"
'''),
    ],
}
