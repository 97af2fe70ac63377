"""ParallelEmbedding.forward looks up its shard without padding_idx: the padding row gets a gradient.

EXPECT: ParallelEmbedding_padding_idx.*backward/grad weight shard
SAYS: tensor_parallel.ParallelEmbedding_padding_idx:backward/grad weight
CLASS: padding
WORLD_SIZES: 2
ONLY: ParallelEmbedding_padding_idx
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelEmbedding.forward": [
        (r'''        local = F.embedding(ids, self.weight, self.padding_idx)
''',
         r'''        local = F.embedding(ids, self.weight)
'''),
    ],
}
