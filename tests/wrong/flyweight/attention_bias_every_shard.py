r"""Every attention shard holds and adds out_proj.bias: the bias is added N times.

EXPECT: structure/out_proj\.bias slices is \(0, \(\(0, 10\),\)\), expected \(0, \(\)\).*out_proj\.bias belongs to shard 0 only
CLASS: values
WORLD_SIZES: 2
ONLY: MultiheadAttention

A wrong implementation: solutions/flyweight.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
EDITS = {
    "_MultiheadAttention#1.ranges": [
        (r'''            out["out_proj.bias"] = (0, [(0, e)] if index == 0 else [])
''',
         r'''            out["out_proj.bias"] = (0, [(0, e)])
'''),
    ],
}
