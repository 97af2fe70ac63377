r"""ColumnParallelLinear.from_tensors keeps the serial weight in a plain dict (to gather it
later, say): the parameters are shards, but every rank still holds the whole layer.

EXPECT: ColumnParallelLinear.*memory/bytes held besides parameters and buffers is \d+, expected at most .*keep only your shards
CLASS: memory
WORLD_SIZES: 2
RULE: Memory
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ColumnParallelLinear.from_tensors": [
        (r'''        layer = cls(in_features, out_features, bias is not None, gather_output, group,
                    device=weight.device, dtype=weight.dtype)
''',
         r'''        layer = cls(in_features, out_features, bias is not None, gather_output, group,
                    device=weight.device, dtype=weight.dtype)
        layer.__dict__["serial"] = {"weight": weight.detach().clone()}
'''),
    ],
}
