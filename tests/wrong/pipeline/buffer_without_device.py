r"""The receive buffer of an activation is made without device=: in CPU memory on a GPU run.

EXPECT: irecv was given a \[2, 8\] float64 tensor made without a device.*rule .Device.
CLASS: device
RULE: Device
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "_input": [
        (r'''    return torch.empty_like(xs[i])
''',
         r'''    return torch.empty(xs[i].shape, dtype=xs[i].dtype)
'''),
    ],
}
