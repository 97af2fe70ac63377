r"""Every rank does a blocking send before its receive: the ring deadlocks.

EXPECT: HANG +\[E4.2\] rotation\.rotate .*deadlock.*rank \d waited in send called from rotation\.py:\d+ in rotate_async.*Post the receive and the send together
CLASS: deadlock
WORLD_SIZES: 2
ONLY: rotate
RULE: Post together

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "rotate_async": [
        (r'''    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, dst, group),
                                    dist.P2POp(dist.irecv, received, src, group)])
''',
         r'''    dist.send(sent, dst, group)
    dist.recv(received, src, group)
    works = []
'''),
    ],
}
