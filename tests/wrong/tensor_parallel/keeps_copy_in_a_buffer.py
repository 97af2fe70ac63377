r"""ColumnParallelLinear.from_tensors keeps the serial weight as a non-persistent buffer (to
gather it later, say): not a parameter, not in the state dict, but every rank holds the whole
layer.

EXPECT: ColumnParallelLinear .*memory/bytes held besides parameters and buffers is \d+, expected at most .*keep only your shards
CLASS: memory
RULE: Memory
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
         r'''        with torch.no_grad():
            layer.weight.copy_(_slice(weight, 0, layer.tp_size, layer.tp_rank))
            if bias is not None:
                layer.bias.copy_(_slice(bias, 0, layer.tp_size, layer.tp_rank))
        layer.register_buffer("serial_weight", weight.detach().clone(), persistent=False)
        return _frozen_like(layer, weight=weight, bias=bias)
'''),
    ],
}
