r"""one_f_one_b's steady state runs one iteration too few (student walk-through M67): the last
micro-batch is never run, which the schedule names before the loss it leaves wrong.

EXPECT: one_f_one_b.*M=6/forwards and backwards, in order is 'F0 B0 F1 B1 F2 B2 F3 B3 F4 B4', expected 'F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5'.*rule 'Schedule'
CLASS: off-by-one
WORLD_SIZES: 1
ONLY: one_f_one_b

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''    for i in range(warmup, m):''',
         r'''    for i in range(warmup, m - 1):'''),
    ],
}
