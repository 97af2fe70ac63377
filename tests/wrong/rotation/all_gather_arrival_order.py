"""ring_all_gather concatenates the pieces in arrival order instead of rank order.

EXPECT: ring_all_gather dim=0/output max abs error.*concatenate in RANK order
CLASS: values
WORLD_SIZES: 2
ONLY: ring_all_gather
RULE: Results

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_all_gather": [
        (r'''    parts = [None] * world
    parts[rank] = current = tensor.detach()
''',
         r'''    parts = [tensor.detach()]
    current = parts[0]
'''),
        (r'''        parts[(rank - k) % world] = current
''',
         r'''        parts.append(current)
'''),
    ],
}
