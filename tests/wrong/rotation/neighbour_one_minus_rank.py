r"""Computes the neighbour as 1 - r: right for two ranks only.

EXPECT: rotation\.rotate .*phase clockwise: rank \d raised ValueError.*hint: clockwise: rank r sends to \(r \+ 1\) % N
CLASS: 3-4-ranks
WORLD_SIZES: 3
ONLY: rotate

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_peers": [
        (r'''    step = 1 if direction == "clockwise" else -1
    return _global_rank(group, (rank + step) % world), _global_rank(group, (rank - step) % world)
''',
         r'''    peer = 1 - rank  # the other rank
    return _global_rank(group, peer), _global_rank(group, peer)
'''),
    ],
}
