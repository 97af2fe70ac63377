r"""ring_peers swaps destination and source: 'clockwise' sends to r - 1 (invisible with two ranks).

EXPECT: FAIL  \[E4\.1\] rotation\.ring_peers  \(fails at world size 3\).*\(destination, source\) of rank \d.*hint: clockwise: rank r sends to \(r \+ 1\) % N.*rotation\.rotate .*hint: this may follow from \[E4\.1\] rotation\.ring_peers
CLASS: direction 3-4-ranks
WORLD_SIZES: 2 3
ONLY: ring_peers rotate

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_peers": [
        (r'''    return _global_rank(group, (rank + step) % world), _global_rank(group, (rank - step) % world)
''',
         r'''    return _global_rank(group, (rank - step) % world), _global_rank(group, (rank + step) % world)
'''),
    ],
}
