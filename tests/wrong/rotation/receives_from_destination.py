r"""ring_peers returns the destination as the source too: every rank receives from the rank it sends to.

With two ranks the next and the previous rank are the same one, so it passes; from three
ranks on, rank r waits for rank r+1, which sends to r+2: a deadlock.

WORLD_SIZES: 3
EXPECT: HANG +\[E4.2\] rotation\.rotate .*deadlock.*hint: rank \d waits to receive from rank \d, but rank \d never posted a send to rank \d in this check \(its sends went to rank\(s\) \d\)
CLASS: 3-4-ranks deadlock direction
ONLY: rotate
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_peers": [
        (r'''    return _global_rank(group, (rank + step) % world), _global_rank(group, (rank - step) % world)
''',
         r'''    return _global_rank(group, (rank + step) % world), _global_rank(group, (rank + step) % world)
'''),
    ],
}
