r"""RowParallelLinear.from_tensors sets its shard's .data to a slice of the serial weight: no
copy, but the view keeps the whole serial weight alive on every rank.

EXPECT: RowParallelLinear .*memory/bytes held besides parameters and buffers is \d+, expected at most .*keep only your shards
CLASS: memory view-shard
WORLD_SIZES: 2
ONLY: RowParallelLinear
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "RowParallelLinear.from_tensors": [
        (r'''            layer.weight.copy_(_slice(weight, 1, layer.tp_size, layer.tp_rank))
            if bias is not None:
                layer.bias.copy_(bias.detach())''',
         r'''            layer.weight.data = _slice(weight, 1, layer.tp_size, layer.tp_rank)
            if bias is not None:
                layer.bias.copy_(bias.detach())'''),
    ],
}
