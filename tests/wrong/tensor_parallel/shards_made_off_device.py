r"""from_tensors builds the parallel layer with the serial weight's dtype but not its device:
its shards are made in CPU memory on a GPU run, and the first matmul with the input (on
the GPU) fails there.

EXPECT: made without a device \(at tensor_parallel.py:\d+.*rule 'Device'.*hint: rule 'Device'
CLASS: device
WORLD_SIZES: 2
ONLY: ColumnParallelLinear
RULE: Device
"""
EDITS = {
    "ColumnParallelLinear.from_tensors": [
        (r'''        layer = cls(in_features, out_features, bias is not None, gather_output, group,
                    device=weight.device, dtype=weight.dtype)''',
         r'''        layer = cls(in_features, out_features, bias is not None, gather_output, group,
                    dtype=weight.dtype)'''),
    ],
}
