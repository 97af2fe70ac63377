r"""ring_reduce_scatter posts the rotation of its partial sum, then reuses that buffer for its
next chunk before the transfer is waited ("one buffer, no allocation"): NCCL may still be
sending it, so the peer receives a mix (gloo often copies early and hides it).

EXPECT: ring_reduce_scatter .*the buffer of the (isend|send) to rank \d at rotation\.py:\d+ in rotate_async.* was written to before its work was waited.*hint: rule 'Send buffers'
CLASS: in-place send-buffer
RULE: Send buffers
WORLD_SIZES: 2
ONLY: ring_reduce_scatter
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_reduce_scatter": [
        (r'''    for k in range(1, world):
        partial = rotate(partial, "clockwise", group) + chunks[(rank - 1 - k) % world]
''',
         r'''    for k in range(1, world):
        handle = rotate_async(partial, "clockwise", group)
        partial.copy_(chunks[(rank - 1 - k) % world])       # my next chunk, in the same buffer
        partial += handle.wait()
'''),
    ],
}
