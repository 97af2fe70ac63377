r"""rotate_async allocates the receive buffer in the dtype of what it sends, ignoring
recv_dtype: a source that sends another dtype fills a buffer of the wrong size.

EXPECT: rotation\.rotate_uneven .*phase recv_dtype.*(another size than the buffer waiting for it.*recv_dtype when the peer sends another dtype|has dtype|another rank ended while this rank was communicating with it.*recv_dtype)
CLASS: dtype module-settings
RULE: Receivers allocate
WORLD_SIZES: 2
ONLY: rotate_uneven
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "rotate_async": [
        (r'''                           dtype=recv_dtype or tensor.dtype, device=tensor.device)
''',
         r'''                           dtype=tensor.dtype, device=tensor.device)
'''),
    ],
}
