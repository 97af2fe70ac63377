r"""rotate_async waits on the send's work before returning ('make sure it left'), with the receive posted but not waited: every rank waits for a peer that is itself waiting.

EXPECT: HANG +\[E4\.2\] rotation\.rotate .*waited in wait\(\) on isend.*hint: every rank waits on its SEND's work while its receive is posted but not waited
CLASS: deadlock
WORLD_SIZES: 2
ONLY: rotate

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
REPLACE = [
    (r'''                                    dist.P2POp(dist.irecv, received, src, group)])
    return RotationHandle(works, received, sent)
''',
     r'''                                    dist.P2POp(dist.irecv, received, src, group)])
    works[0].wait()
    return RotationHandle(works, received, sent)
'''),
]
