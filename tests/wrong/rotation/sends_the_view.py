r"""rotate_async sends `tensor.detach()` as it comes: a transposed view is not contiguous, and
NCCL sends a non-contiguous tensor's bytes in storage order (gloo refuses it).

EXPECT: rotation\.rotate .*phase transposed: rank \d raised NCCLRuleError: isend was given a non-contiguous \[2, 3\] float64 tensor .*hint: rule 'Contiguity'
CLASS: device contiguity
RULE: Contiguity
WORLD_SIZES: 2
ONLY: rotate
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "rotate_async": [
        (r'''    sent = tensor.detach().contiguous()  # a copy only if `tensor` was not contiguous
''',
         r'''    sent = tensor.detach()
'''),
    ],
}
