"""k and v rotate as ONE stacked buffer (one message a step, twice the bytes), and so do the
gradient accumulators in backward."""
EDITS = {
    "ring_attention_forward": [
        (r'''            incoming = (rotate_async(k, "clockwise", group), rotate_async(v, "clockwise", group))
''',
         r'''            incoming = rotate_async(torch.stack([k, v]), "clockwise", group)
'''),
        (r'''            k, v = incoming[0].wait(), incoming[1].wait()        # the block used is dropped
''',
         r'''            k, v = incoming.wait().unbind(0)                     # the block used is dropped
'''),
    ],
    "ring_attention_backward": [
        (r'''            incoming = (rotate_async(k, "counterclockwise", group),
                        rotate_async(v, "counterclockwise", group))
''',
         r'''            incoming = rotate_async(torch.stack([k, v]), "counterclockwise", group)
'''),
        (r'''        if sending is not None:                                  # block s's accumulators, from r+1
            dk_s += sending[0].wait()
            dv_s += sending[1].wait()
        sending = (rotate_async(dk_s, "counterclockwise", group),
                   rotate_async(dv_s, "counterclockwise", group))
        if incoming is not None:
            k, v = incoming[0].wait(), incoming[1].wait()
    return dq, sending[0].wait(), sending[1].wait()              # home after N moves
''',
         r'''        acc = torch.stack([dk_s, dv_s])
        if sending is not None:                                  # block s's accumulators, from r+1
            acc += sending.wait()
        sending = rotate_async(acc, "counterclockwise", group)
        if incoming is not None:
            k, v = incoming.wait().unbind(0)
    return (dq, *sending.wait().unbind(0))                       # home after N moves
'''),
    ],
}
