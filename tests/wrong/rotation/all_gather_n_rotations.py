r"""ring_all_gather does N rotations: the last one only brings back the rank's own tensor.

EXPECT: ring_all_gather dim=0: 2 recv\|irecv call\(s\), expected exactly 1.*an N-th only brings back its own
CLASS: traffic
WORLD_SIZES: 2
ONLY: ring_all_gather
RULE: Communication

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_all_gather": [
        (r'''    parts[rank] = current = tensor.detach()
    for k in range(1, world):
        current = rotate(current, "clockwise", group)
''',
         r'''    parts[rank] = current = tensor.detach()
    for k in range(1, world + 1):
        current = rotate(current, "clockwise", group)
'''),
    ],
}
