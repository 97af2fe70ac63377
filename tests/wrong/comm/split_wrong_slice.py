"""Split keeps the mirror slice (N-1-r) instead of slice r.

EXPECT: Split.*forward/output
CLASS: values
WORLD_SIZES: 2
RULE: Results
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "Split.forward": [
        (r'''        return x.narrow(dim, rank * size, size).contiguous()
''',
         r'''        return x.narrow(dim, (world - 1 - rank) * size, size).contiguous()
'''),
    ],
}
