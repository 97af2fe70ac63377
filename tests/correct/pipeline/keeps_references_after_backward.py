r"""1F1B keeps every micro-batch's (input, output) in its list after the backward (student
walk-through M09): a backward without retain_graph has freed what autograd saved, so the
references hold no activations and rule 'Memory' holds.

A correct implementation: solutions/pipeline.py with this one difference.
"""

# The difference, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''    kept, loss = [], None
''',
         r'''    kept, loss = [], None
    done = []               # every micro-batch's (input, output), kept to the end
'''),
        (r'''        old_x, old_out = kept.pop(0)
        dx = _backward(stage, old_x, old_out, grad)
        if i == m - 1:''',
         r'''        old_x, old_out = kept.pop(0)
        done.append((old_x, old_out))
        dx = _backward(stage, old_x, old_out, grad)
        if i == m - 1:'''),
    ],
}
