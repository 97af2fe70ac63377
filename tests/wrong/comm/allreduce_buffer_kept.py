r"""AllReduce all-reduces into a buffer it keeps on the class for the next call of the same
shape ("saves an allocation") and returns it: the first call's output changes when it is
called again.

EXPECT: AllReduce .*forward/output after the later calls max abs error.*hint: rule 'New tensors': the first call's output changed
CLASS: in-place kept-output
RULE: New tensors
WORLD_SIZES: 2
ONLY: AllReduce
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllReduce.forward": [
        (r'''        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out
''',
         r'''        buffers = AllReduce.__dict__.get("_buffers") or {}
        AllReduce._buffers = buffers
        out = buffers.setdefault((x.shape, x.dtype), torch.empty(x.shape, dtype=x.dtype,
                                                                 device=x.device))
        out.copy_(x)
        dist.all_reduce(out, group=group)
        return out
'''),
    ],
}
