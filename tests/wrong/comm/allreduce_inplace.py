"""AllReduce all-reduces the caller's tensor in place.

EXPECT: AllReduce.*input after.*hint: rule 'New tensors': forward changed its input in place
CLASS: in-place
WORLD_SIZES: 2
RULE: New tensors
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllReduce.forward": [
        (r'''        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out
''',
         r'''        x = x.contiguous()                   # the caller's own tensor when it is contiguous
        dist.all_reduce(x, group=group)
        return x.clone()
'''),
    ],
}
