"""Backward rotates k and v CLOCKWISE, as forward does, and the accumulators travel clockwise
with them: block s's reach rank s + 1 after N - 1 moves, and come home with the N-th."""
EDITS = {
    "ring_attention_backward": [
        (r'''        s = (rank + step) % world                                # blocks come from r+1 now
        incoming = None
        if step < world - 1:
            incoming = (rotate_async(k, "counterclockwise", group),
                        rotate_async(v, "counterclockwise", group))
''',
         r'''        s = (rank - step) % world                                # blocks come from r-1
        incoming = None
        if step < world - 1:
            incoming = (rotate_async(k, "clockwise", group), rotate_async(v, "clockwise", group))
'''),
        (r'''        sending = (rotate_async(dk_s, "counterclockwise", group),
                   rotate_async(dv_s, "counterclockwise", group))
''',
         r'''        sending = (rotate_async(dk_s, "clockwise", group), rotate_async(dv_s, "clockwise", group))
'''),
    ],
}
