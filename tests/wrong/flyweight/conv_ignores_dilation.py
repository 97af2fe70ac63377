r"""A wrapped Conv2d convolves each shard with F.conv2d and the layer's stride and padding, but
not its dilation nor its padding mode (circular, reflect ...).

EXPECT: \[E5\.2\] flyweight\.Conv2d .*(forward/output|raised).*hint: a wrapped Conv2d computes as the module does.*dilation
CLASS: values module-settings
WORLD_SIZES: 2
ONLY: Conv2d
"""
BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "_Conv2d.partial": [
        (r'''        return m._conv_forward(inputs[0], p["weight"], p.get("bias"))  # handles padding_mode
''',
         r'''        return F.conv2d(inputs[0], p["weight"], p.get("bias"), m.stride, m.padding)
'''),
    ],
}
