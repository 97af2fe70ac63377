r"""Every backward keeps its graph (retain_graph=True "to be safe"): 1F1B then holds every micro-batch's activations.

EXPECT: rank 0, M=6/micro-batches whose activations were alive at once is 6, expected at most 2.*rule 'Memory'
CLASS: memory
RULE: Memory
WORLD_SIZES: 2
ONLY: one_f_one_b

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "_backward": [
        (r'''        out.backward(grad)
''',
         r'''        out.backward(grad, retain_graph=True)
'''),
    ],
}
