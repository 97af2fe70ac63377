r"""ParallelEmbedding.from_serial keeps the serial table's storage (a torch.UntypedStorage, no
tensor) on the layer: nothing the layer holds is a tensor of the table, yet every rank holds
the whole table.

EXPECT: ParallelEmbedding .*memory/bytes held besides parameters and buffers is \d+, expected at most .*keep only your shards
CLASS: memory
WORLD_SIZES: 2
ONLY: ParallelEmbedding
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelEmbedding.from_serial": [
        (r'''        return _frozen_like(layer, weight=embedding.weight)
''',
         r'''        layer._serial = embedding.weight.detach().clone().untyped_storage()
        return _frozen_like(layer, weight=embedding.weight)
'''),
    ],
}
