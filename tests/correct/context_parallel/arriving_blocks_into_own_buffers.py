r"""ring_attention_forward clones k and v once per call and copies each arriving block into
those clones (after the rotation's wait): writing into buffers of its own, never into the
caller's k and v, is allowed (rule 'New tensors')."""
EDITS = {
    "ring_attention_forward": [
        (r'''    for i in range(world):
        s = (rank - i) % world                                   # whose block is in hand
''',
         r'''    k, v = k.clone(), v.clone()                                  # this call's own buffers
    for i in range(world):
        s = (rank - i) % world                                   # whose block is in hand
'''),
        (r'''            k, v = incoming[0].wait(), incoming[1].wait()        # the block used is dropped
''',
         r'''            k.copy_(incoming[0].wait())                          # into our own buffers
            v.copy_(incoming[1].wait())
'''),
    ],
}
