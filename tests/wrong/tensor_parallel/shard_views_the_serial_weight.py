r"""ColumnParallelLinear.from_tensors makes its shard nn.Parameter(weight[a:b]) of the serial
weight: no copy, but the view keeps the whole serial weight alive on every rank.

EXPECT: ColumnParallelLinear .*memory/bytes held besides parameters and buffers is \d+, expected at most .*keep only your shards
CLASS: memory view-shard
WORLD_SIZES: 2
ONLY: ColumnParallelLinear
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ColumnParallelLinear.from_tensors": [
        (r'''        with torch.no_grad():
            layer.weight.copy_(_slice(weight, 0, layer.tp_size, layer.tp_rank))
            if bias is not None:
                layer.bias.copy_(_slice(bias, 0, layer.tp_size, layer.tp_rank))
        return _frozen_like(layer, weight=weight, bias=bias)
''',
         r'''        layer.weight = nn.Parameter(_slice(weight, 0, layer.tp_size, layer.tp_rank))
        if bias is not None:
            layer.bias = nn.Parameter(_slice(bias, 0, layer.tp_size, layer.tp_rank))
        return _frozen_like(layer, weight=weight, bias=bias)
'''),
    ],
}
