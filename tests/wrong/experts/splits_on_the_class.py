r"""AllToAll keeps the splits on the class: the second call's overwrite the first's before its backward.

EXPECT: AllToAll.*phase backward.*kept on ctx per call
CLASS: per-call-state
WORLD_SIZES: 2 3
ONLY: AllToAll
"""

EDITS = {
    "AllToAll.forward": [
        (r'''        ctx.splits, ctx.group = (list(input_splits), list(output_splits)), group
''',
         r'''        AllToAll.splits, ctx.group = (list(input_splits), list(output_splits)), group
'''),
    ],
    "AllToAll.backward": [
        (r'''        input_splits, output_splits = ctx.splits
''',
         r'''        input_splits, output_splits = AllToAll.splits
'''),
    ],
}
