r"""AllReduce skips the all-reduce where this rank's partial sum is zero ("nothing to add"):
the other ranks' all-reduce then meets this rank's next collective, or none.

EXPECT: HANG  \[E2\.1\] comm\.AllReduce .*rank 0 waited in all_reduce.*rank\(s\) 1 finished this check while the others wait in all_reduce: 
SAYS: hang.left-out
CLASS: deadlock zero-data
WORLD_SIZES: 2
ONLY: AllReduce
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllReduce.forward": [
        (r'''        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
''',
         r'''        out = x.contiguous().clone()
        if out.any():                        # a zero partial sum adds nothing
            dist.all_reduce(out, group=group)
'''),
    ],
}
