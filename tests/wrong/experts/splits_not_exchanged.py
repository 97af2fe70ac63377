r"""The split sizes are not exchanged: each rank expects to receive as many rows as it sends.

EXPECT: ExpertParallelMoE .*phase forward: the ranks' \d\w\w collective on the group, all_to_all_single at .*was given split sizes that do not pair up: rank \d sends \d+ rows to rank \d .*input_splits.*but rank \d expects \d+ from rank \d.*exchange the split sizes first
CLASS: values deadlock
WORLD_SIZES: 2 3 4
ONLY: ExpertParallelMoE ExpertParallelMoE_top2_overflow

Whichever rank the transport fails first (the one that sees the sizes differ dies, its peers
see "Connection reset"), the report pairs the ranks' split sizes from their records and
statuses and names both numbers (E10 finding M04).
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        received = exchange_splits(counts, self.group)                 # [N, local]
''',
         r'''        received = counts                       # "everyone sends about the same"
'''),
    ],
}
