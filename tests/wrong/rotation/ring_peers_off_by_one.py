r"""ring_peers wraps around N + 1 instead of N: the last rank sends to a rank that does not exist.

EXPECT: ERROR  \[E4\.1\] rotation\.ring_peers .*ValueError: Group rank 2 is not part of group.*in ring_peers.*hint: clockwise: rank r sends to \(r \+ 1\) % N.*rotation\.rotate .*hint: this may follow from \[E4\.1\] rotation\.ring_peers, which fails its own check
CLASS: off-by-one
WORLD_SIZES: 2
ONLY: ring_peers rotate

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_peers": [
        (r'''    return _global_rank(group, (rank + step) % world), _global_rank(group, (rank - step) % world)
''',
         r'''    return _global_rank(group, (rank + step) % (world + 1)), _global_rank(group, (rank - step) % world)
'''),
    ],
}
