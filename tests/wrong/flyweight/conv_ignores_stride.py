r"""The wrapped Conv2d convolves each shard with the padding but not the layer's stride.

EXPECT: \[E5\.2\] flyweight\.Conv2d .*forward/output.*hint: a wrapped Conv2d computes as the module does.*stride
CLASS: values
WORLD_SIZES: 2
ONLY: Conv2d

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "_Conv2d.partial": [
        (r'''        return m._conv_forward(inputs[0], p["weight"], p.get("bias"))  # handles padding_mode
''',
         r'''        return F.conv2d(inputs[0], p["weight"], p.get("bias"), padding=m.padding)
'''),
    ],
}
