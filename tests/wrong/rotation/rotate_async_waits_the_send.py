r"""rotate_async waits on the send's work before returning ('make sure it left'), and wait() waits on every work again: gloo can block for ever on a second wait of a finished work.

EXPECT: \[E4\.2\] rotation\.rotate .*wait\(\) on a point-to-point work already waited.*hint: a point-to-point work was waited a second time.*wait on each work once
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
