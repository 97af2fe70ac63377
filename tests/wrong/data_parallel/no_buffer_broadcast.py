"""DataParallel broadcasts rank 0's parameters but not its buffers.

EXPECT: DataParallel_buffers.*forward/output
SAYS: data_parallel.DataParallel_buffers:forward
CLASS: buffers
WORLD_SIZES: 2
ONLY: DataParallel_buffers
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel.__init__": [
        (r'''            for t in list(module.parameters()) + list(module.buffers()):
''',
         r'''            for t in module.parameters():
'''),
    ],
}
