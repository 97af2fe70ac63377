r"""Swaps the directions: 'clockwise' sends to rank r-1 (invisible with two ranks).

EXPECT: rotation\.rotate .*clockwise/received max abs error.*hint: clockwise: rank r sends to \(r \+ 1\) % N
CLASS: 3-4-ranks direction
WORLD_SIZES: 3
ONLY: rotate

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_peers": [
        (r'''    step = 1 if direction == "clockwise" else -1
''',
         r'''    step = -1 if direction == "clockwise" else 1
'''),
    ],
}
