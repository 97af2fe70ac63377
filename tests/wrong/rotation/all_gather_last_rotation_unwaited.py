r"""ring_all_gather starts the next rotation as soon as a block arrives, the last one too, and
never waits that last one's handle: the values are right, one rotation too many travels, and
its handle is let go unwaited.

EXPECT: FAIL +\[E4\.3\] rotation\.ring_all_gather .*transfers never waited is \['(isend|irecv) at rotation\.py:\d+ in rotate_async', '(isend|irecv) at rotation\.py:\d+ in rotate_async'\].*hint: (rule 'Wait on every work'|keep the handle of every transfer you start)
CLASS: unwaited traffic
WORLD_SIZES: 2
ONLY: ring_all_gather

A wrong implementation: solutions/rotation.py with this one bug (an instructor's class: before,
gloo spun on the dropped pair until the check's CPU budget ran out, "too slow").
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_all_gather": [
        (r'''    parts[rank] = current = tensor.detach()
    for k in range(1, world):
        current = rotate(current, "clockwise", group)
        parts[(rank - k) % world] = current
''',
         r'''    parts[rank] = current = tensor.detach()
    handle = rotate_async(current, "clockwise", group)
    for k in range(1, world):
        current = handle.wait()
        parts[(rank - k) % world] = current
        handle = rotate_async(current, "clockwise", group)      # the next one, started early
'''),
    ],
}
