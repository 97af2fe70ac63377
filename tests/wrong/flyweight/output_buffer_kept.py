r"""A wrapped Linear writes its output into a buffer it keeps on the module for the next call
of the same shape ("no allocation per step"): the first call's output changes when the layer
is called again.

EXPECT: flyweight\.FlyweightWrapper .*forward/output 0 after the later calls max abs error
SAYS: flyweight.FlyweightWrapper:forward/output 0 after the later calls
CLASS: in-place kept-output
WORLD_SIZES: 2
ONLY: FlyweightWrapper
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
EDITS = {
    "FlyweightWrapper._rotating_forward": [
        (r'''            out = inputs[0].new_empty(*inputs[0].shape[:-1], self.full_shapes["weight"][0])
''',
         r'''            shape = (*inputs[0].shape[:-1], self.full_shapes["weight"][0])
            if getattr(self, "_out", None) is None or tuple(self._out.shape) != shape:
                self._out = inputs[0].new_empty(shape)
            out = self._out
'''),
    ],
}
