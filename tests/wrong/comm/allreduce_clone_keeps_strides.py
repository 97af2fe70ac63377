r"""AllReduce all-reduces x.clone(): a clone keeps the strides of a transposed input, so the
collective gets a non-contiguous tensor, which NCCL refuses (gloo takes it).

EXPECT: AllReduce .*phase forward: rank \d raised NCCLRuleError: all_reduce was given a non-contiguous \[12, 12, 12\] float64 tensor \(at comm\.py:\d+ in forward\).*hint: rule 'Contiguity'
CLASS: device contiguity
RULE: Contiguity
WORLD_SIZES: 2
ONLY: AllReduce
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllReduce.forward": [
        (r'''        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
''',
         r'''        out = x.clone()
        dist.all_reduce(out, group=group)
'''),
    ],
}
