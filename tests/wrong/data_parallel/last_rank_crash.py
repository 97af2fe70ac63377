"""DataParallel keeps one hook list per rank sized for two ranks: rank 2 and up crash with an IndexError.

EXPECT: DataParallel.*rank 2 raised IndexError
CLASS: 3-4-ranks
WORLD_SIZES: 3
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel.__init__": [
        (r'''        self._pending = 0
''',
         r'''        self._pending = [0, 0][dist.get_rank(group)]
'''),
    ],
}
