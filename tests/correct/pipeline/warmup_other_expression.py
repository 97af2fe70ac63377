r"""The warm-up count written with a conditional: N - r - 1 if it is below M, else M.

A correct implementation: solutions/pipeline.py with this one difference.
"""

# The difference, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''    warmup = min(world - rank - 1, m)
''',
         r'''    warmup = world - 1 - rank if world - 1 - rank < m else m
'''),
    ],
}
