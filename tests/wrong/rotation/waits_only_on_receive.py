r"""wait() waits only on the receive's work (the last of the batch) and drops the send's.

When the values come out right, the rule that every work is waited catches it; on gloo
a send whose work is dropped is sometimes never delivered, and the hang is named by its
cause (on NCCL the send buffer could be reused while the send still reads it).

EXPECT: \[E4.2\] rotation\.rotate .*(clockwise/transfers never waited is \[.isend at rotation\.py.*expected \[\].*hint:.*rule .Wait on EVERY work.|rank \d waits to receive from rank \d, which posted the send but never waited on its work)
CLASS: unwaited
WORLD_SIZES: 2
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
