r"""ParallelEmbedding.from_serial zeroes the padding row after copying, as a fresh
nn.Embedding starts: a pretrained table's padding row (which need not be zero) is lost.

EXPECT: ParallelEmbedding_padding_idx .*forward/output max abs error
SAYS: tensor_parallel.ParallelEmbedding_padding_idx:forward
CLASS: padding pretrained
WORLD_SIZES: 2
ONLY: ParallelEmbedding_padding_idx
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelEmbedding.from_serial": [
        (r'''            layer.weight.copy_(_slice(embedding.weight, 1, layer.tp_size, layer.tp_rank))
''',
         r'''            layer.weight.copy_(_slice(embedding.weight, 1, layer.tp_size, layer.tp_rank))
            if layer.padding_idx is not None:
                layer.weight[layer.padding_idx].zero_()
'''),
    ],
}
