r"""train_step steps on the raw gradients: sync_gradients is never called.

EXPECT: train_step.*(sync_gradients|router|expert)
CLASS: forgotten-collective values
WORLD_SIZES: 2
ONLY: train_step
"""

EDITS = {
    "train_step": [
        (r'''    loss.backward()
    sync_gradients(model, dp_group)
    optimizer.step()
''',
         r'''    loss.backward()
    optimizer.step()
'''),
    ],
}
