r"""The split sizes are not exchanged: each rank expects to receive as many rows as it sends.

EXPECT: ExpertParallelMoE.*rank \d.*all_to_all
CLASS: values deadlock
WORLD_SIZES: 2 3
ONLY: ExpertParallelMoE ExpertParallelMoE_top2_overflow

The rank whose transport sees the sizes differ may die before it writes its outcome; its
peers then only say that it left ("Connection reset"), and the hint to exchange the split
sizes first is not always the one shown: what is certain is the check and the call.
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        received = exchange_splits(counts, self.group)                 # [N, local]
''',
         r'''        received = counts                       # "everyone sends about the same"
'''),
    ],
}
