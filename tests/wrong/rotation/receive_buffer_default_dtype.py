r"""rotate_async allocates the receive buffer with the right shape and device but no dtype:
float32, the default dtype, whatever arrives.

EXPECT: rotation\.rotate .*(another size than the buffer waiting for it.*shape and dtype of what the peer sends|has dtype float32, expected float64.*rule 'Dtypes'|another rank ended while this rank was communicating with it.*another shape or dtype than what its peer sends)
CLASS: dtype
RULE: Dtypes
WORLD_SIZES: 2
ONLY: rotate
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "rotate_async": [
        (r'''                           dtype=recv_dtype or tensor.dtype, device=tensor.device)
''',
         r'''                           device=tensor.device)
'''),
    ],
}
