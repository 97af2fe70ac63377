r"""ColumnParallelLinear.from_tensors builds the layer on the serial weight's device but not in
its dtype: the shards are float32 (the default dtype) whatever the serial model's dtype.

EXPECT: ColumnParallelLinear .*structure/weight has dtype float32, expected float64.*hint: rule 'Dtypes'
CLASS: dtype
RULE: Dtypes
WORLD_SIZES: 2
ONLY: ColumnParallelLinear
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ColumnParallelLinear.from_tensors": [
        (r'''        layer = cls(in_features, out_features, bias is not None, gather_output, group,
                    device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            layer.weight.copy_(_slice(weight, 0, layer.tp_size, layer.tp_rank))''',
         r'''        layer = cls(in_features, out_features, bias is not None, gather_output, group,
                    device=weight.device)
        with torch.no_grad():
            layer.weight.copy_(_slice(weight, 0, layer.tp_size, layer.tp_rank))'''),
    ],
}
