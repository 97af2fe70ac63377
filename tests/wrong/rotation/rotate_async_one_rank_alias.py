r"""With one rank, rotate_async's handle holds the caller's tensor itself ("nothing moved"):
the result is an alias of the input, which the caller may change or keep.

EXPECT: rotation\.rotate .*\(fails at world size 1\).*returned a new tensor, not the input or a view of it is False, expected True.*rule 'New tensors'
CLASS: in-place one-rank-alias
WORLD_SIZES: 1
ONLY: rotate rotate_async
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "rotate_async": [
        (r'''        return RotationHandle([], tensor.detach().clone(), None)
''',
         r'''        return RotationHandle([], tensor.detach(), None)
'''),
    ],
}
