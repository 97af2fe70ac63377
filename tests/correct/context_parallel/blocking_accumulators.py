"""Backward rotates the gradient accumulators with the blocking rotate (only the blocks'
rotations must overlap compute), while k and v still rotate asynchronously."""
EDITS = {
    "ring_attention_backward": [
        (r'''    sending = None                                               # accumulators in flight
''',
         r'''    arrived = None                                               # accumulators from r+1
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
         r'''        if arrived is not None:                                  # block s's accumulators
            dk_s += arrived[0]
            dv_s += arrived[1]
        arrived = (rotate(dk_s, "counterclockwise", group), rotate(dv_s, "counterclockwise", group))
        if incoming is not None:
            k, v = incoming[0].wait(), incoming[1].wait()
    return dq, arrived[0], arrived[1]                            # home after N moves
'''),
    ],
}
# edits of module-level text, applied after EDITS:
REPLACE = [
    (r'''from .rotation import ring_all_gather, rotate_async''',
     r'''from .rotation import ring_all_gather, rotate, rotate_async'''),
]
