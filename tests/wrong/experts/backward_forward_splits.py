r"""AllToAll.backward sends the gradients with the forward's splits, not swapped.

EXPECT: AllToAll.*(REVERSE all-to-all|splits)
CLASS: values
WORLD_SIZES: 2 3
ONLY: AllToAll
"""

EDITS = {
    "AllToAll.backward": [
        (r'''        dist.all_to_all_single(dx, grad.contiguous(), input_splits, output_splits,
''',
         r'''        dx = grad.new_empty((sum(output_splits),) + tuple(grad.shape[1:]))
        dist.all_to_all_single(dx, grad.contiguous(), output_splits, input_splits,
'''),
    ],
}
