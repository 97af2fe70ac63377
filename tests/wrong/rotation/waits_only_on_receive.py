r"""wait() waits only on the receive's work (the last of the batch) and drops the send's.

On gloo the send has long finished, so the values are right; on NCCL the send buffer
can be reused while the send still reads it. Only the rule that every work is waited
catches it.

EXPECT: \[E4.2\] rotation\.rotate .*(clockwise/transfers never waited is \[.isend at rotation\.py.*expected \[\].*hint:.*rule .Wait on EVERY work.|rank \d waits to receive from rank \d, which posted the send but never waited on its work)
ONLY: rotate rotate_async
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
REPLACE = [
    (r'''        for w in self._works:
            w.wait()
''',
     r'''        if self._works:
            self._works[-1].wait()   # the receive: that is the data we need
'''),
]
