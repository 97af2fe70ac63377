r"""ParallelEmbedding splits the table along the wrong dimension: rank r keeps vocabulary rows [r*num/N, (r+1)*num/N) instead of embedding columns.

Right with one rank; from two on the shard has the wrong shape ([num/N, dim] instead of
[num, dim/N]) and the lookup of ids past num/N fails.

EXPECT: ParallelEmbedding  .*structure/weight has shape \(48, 48\), expected \(96, 24\).*embedding dim is split, not the vocabulary
CLASS: values
WORLD_SIZES: 2
ONLY: ParallelEmbedding
RULE: Layout
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelEmbedding.__init__": [
        (r'''        local = _divide(type(self).__name__, "embedding_dim", embedding_dim, self.tp_size)
''',
         r'''        local = _divide(type(self).__name__, "num_embeddings", num_embeddings, self.tp_size)
'''),
        (r'''        self.weight = nn.Parameter(torch.randn(num_embeddings, local, device=device, dtype=dtype))
''',
         r'''        self.weight = nn.Parameter(torch.randn(local, embedding_dim, device=device, dtype=dtype))
'''),
    ],
    "ParallelEmbedding.from_serial": [
        (r'''            layer.weight.copy_(_slice(embedding.weight, 1, layer.tp_size, layer.tp_rank))
''',
         r'''            layer.weight.copy_(_slice(embedding.weight, 0, layer.tp_size, layer.tp_rank))
'''),
    ],
}
