"""from_tensors builds the parallel layer on the host (no device=) and then moves it to the
serial weight's device with .to(): on a GPU its parameters end up on the GPU (rule 'Device'
allows it)."""
EDITS = {
    "ColumnParallelLinear.from_tensors": [
        (r'''        layer = cls(in_features, out_features, bias is not None, gather_output, group,
                    device=weight.device, dtype=weight.dtype)''',
         r'''        layer = cls(in_features, out_features, bias is not None, gather_output, group,
                    dtype=weight.dtype).to(weight.device)'''),
    ],
}
