"""ring_all_gather rotating counterclockwise: after k rotations rank r holds x_{(r+k) % N}.
"""
EDITS = {
    "ring_all_gather": [
        (r'''        current = rotate(current, "clockwise", group)
        parts[(rank - k) % world] = current''',
         r'''        current = rotate(current, "counterclockwise", group)
        parts[(rank + k) % world] = current'''),
    ],
}
