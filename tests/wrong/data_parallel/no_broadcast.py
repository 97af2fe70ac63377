"""DataParallel never copies rank 0's weights: ranks start from different models.

EXPECT: DataParallel.*init/.*hint: after the constructor the ranks. weights differ
CLASS: values
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel.__init__": [
        (r'''            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, src=src, group=group)
''',
         r'''            pass
'''),
    ],
}
