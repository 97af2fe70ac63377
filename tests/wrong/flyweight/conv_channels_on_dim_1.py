r"""A wrapped Conv2d concatenates the shards' output channels along dim 1: right for a batch
[B, C, H, W], wrong for an unbatched [C, H, W] input, whose channels are dim 0.

EXPECT: \[E5\.2\] flyweight\.Conv2d .*(forward/output has shape|raised RuntimeError: Sizes of tensors must match except in dimension 1).*hint: a wrapped Conv2d computes as the module does.*the channels are dim -3
CLASS: values module-settings
WORLD_SIZES: 2
ONLY: Conv2d
"""
BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "_Conv2d": [
        (r'''    cat_dim = -3  # channels of [B, C, H, W] or [C, H, W]
''',
         r'''    cat_dim = 1  # channels of [B, C, H, W]
'''),
    ],
}
