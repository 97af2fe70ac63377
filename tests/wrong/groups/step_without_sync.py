r"""train_step_2d calls optimizer.step() without sync_gradients: each replica steps on its own batch's gradient.

The replicas drift apart from the first step on (sync_gradients itself is right).

WORLD_SIZES: 4
EXPECT: train_2d_bert.*step1 adam/.*hint: train_step_2d:.*sync_gradients\(model, groups\)
CLASS: forgotten-collective
ONLY: train_2d_bert
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "train_step_2d": [
        (r'''    sync_gradients(model, groups)
''',
         r''''''),
    ],
}
