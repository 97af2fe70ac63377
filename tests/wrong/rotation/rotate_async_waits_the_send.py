r"""rotate_async waits on its handle before returning ('make sure it left'): the rotation cannot overlap anything, and a rank blocks there until its peers post their halves.

EXPECT: HANG +\[E4\.2\] rotation\.rotate_async .*rank 1 waited in wait\(\) on batch_isend_irecv from rotation\.py:\d+ in rotate_async
SAYS: rotation.rotate_async:rotate_async/returned
CLASS: overlap deadlock
WORLD_SIZES: 2
ONLY: rotate_async

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "rotate_async": [
        (r'''                                    dist.P2POp(dist.irecv, received, src, group)])
    return RotationHandle(works, received, sent)
''',
         r'''                                    dist.P2POp(dist.irecv, received, src, group)])
    works[0].wait()
    return RotationHandle(works, received, sent)
'''),
    ],
}
