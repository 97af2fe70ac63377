r"""AllToAll's output buffer is made in the default float32, not in x's dtype.

EXPECT: (rule 'Dtypes'|dtype).*AllToAll
CLASS: dtype values
RULE: Dtypes
WORLD_SIZES: 2
"""

EDITS = {
    "AllToAll.forward": [
        (r'''        out = x.new_empty((sum(output_splits),) + tuple(x.shape[1:]))
''',
         r'''        out = torch.empty((sum(output_splits),) + tuple(x.shape[1:]), device=x.device)
'''),
    ],
}
