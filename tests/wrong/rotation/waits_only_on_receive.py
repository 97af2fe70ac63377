r"""rotate_async posts its own irecv and isend, and wait() waits only on the receive's work
and drops the send's.

When the values come out right, the rule that every work is waited catches it; on gloo
a send whose work is dropped is sometimes never delivered, and the hang is named by its
cause (on NCCL the send buffer could be reused while the send still reads it). With
batch_isend_irecv the same code would be right on NCCL, which returns one handle for
the batch: this bug needs handles of its own.

EXPECT: \[E4.2\] rotation\.rotate .*(clockwise/transfers never waited is \[.isend at rotation\.py.*expected \[\].*hint:.*rule .Wait on every work.|rank \d waits to receive from rank \d, which posted the send but never waited on its work)
CLASS: unwaited
WORLD_SIZES: 2
ONLY: rotate rotate_async
RULE: Wait on every work
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "rotate_async": [
        (r'''    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, dst, group),
                                    dist.P2POp(dist.irecv, received, src, group)])''',
         r'''    works = [dist.irecv(received, src=src, group=group), dist.isend(sent, dst=dst, group=group)]'''),
    ],
    "RotationHandle.wait": [
        (r'''        for w in self._works:
            w.wait()
''',
         r'''        if self._works:
            self._works[0].wait()   # the receive: that is the data we need
'''),
    ],
}
