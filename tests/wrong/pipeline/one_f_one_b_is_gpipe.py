r"""one_f_one_b runs GPipe's order: every micro-batch's activations kept until the backwards.

EXPECT: M=6/forwards and backwards, in order is 'F0 F1 F2 F3 F4 F5 B0.*rule 'Schedule'
CLASS: memory
WORLD_SIZES: 2
ONLY: one_f_one_b

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''    m = num_microbatches
    xs, ys = _micro_batches(inputs, targets, m)
''',
         r'''    return gpipe(stage, inputs, targets, loss_fn, num_microbatches, group)
    m = num_microbatches
    xs, ys = _micro_batches(inputs, targets, m)
'''),
    ],
}
