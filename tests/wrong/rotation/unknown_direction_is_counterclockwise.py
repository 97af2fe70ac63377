r"""ring_peers takes any direction other than 'clockwise' for counterclockwise: a typo ('left',
'clock-wise') silently rotates the wrong way instead of raising.

EXPECT: rotation\.bad_direction .*exception raised for direction='left' is 'nothing', expected 'ValueError'.*hint: rule 'Raises'
CLASS: values
WORLD_SIZES: 2
ONLY: bad_direction
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_peers": [
        (r'''    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'clockwise' or 'counterclockwise', got {direction!r}")
''',
         r''''''),
    ],
}
