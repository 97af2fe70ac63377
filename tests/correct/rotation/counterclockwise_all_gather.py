"""ring_all_gather rotating counterclockwise: after k rotations rank r holds x_{(r+k) % N}.
"""
REPLACE = [
    ("""        current = rotate(current, "clockwise", group)
        parts[(rank - k) % world] = current""",
     """        current = rotate(current, "counterclockwise", group)
        parts[(rank + k) % world] = current"""),
]
