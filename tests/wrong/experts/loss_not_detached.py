r"""train_step returns the loss itself, not detached: the caller keeps the step's whole graph.

EXPECT: train_step.*rank \d, sgd step 1/loss returned.*requires grad.*rule 'Results'.*loss\.detach\(\)
CLASS: values
WORLD_SIZES: 1 2
ONLY: train_step

The docstring says "returns this rank's loss (detached)" (E10 finding M40).
"""

EDITS = {
    "train_step": [
        (r'''    return loss.detach()
''',
         r'''    return loss
'''),
    ],
}
