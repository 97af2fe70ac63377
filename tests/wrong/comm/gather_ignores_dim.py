"""AllGather always concatenates along the last dimension, whatever `dim` is.

EXPECT: AllGather.*dim=0
CLASS: values
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllGather.forward": [
        (r'''        return torch.cat(parts, dim=dim)
''',
         r'''        return torch.cat(parts, dim=-1)
'''),
    ],
}
