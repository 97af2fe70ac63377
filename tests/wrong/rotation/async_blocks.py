r"""rotate_async waits for the transfer before returning (nothing can overlap it).

EXPECT: HANG +\[E4\.2\] rotation\.rotate_async .*phase rotate_async: deadlock.*rank 0 waited in the check's wait for rank\(s\) \[1\] to get back from rotate_async
SAYS: rotation.rotate_async:rotate_async/returned
CLASS: overlap
WORLD_SIZES: 2
ONLY: rotate_async

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "rotate_async": [
        (r'''    return RotationHandle(works, received, sent)
''',
         r'''    for w in works:
        w.wait()
    return RotationHandle([], received, sent)  # already complete
'''),
    ],
}
