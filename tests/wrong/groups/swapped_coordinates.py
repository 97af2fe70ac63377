r"""build_groups builds the right groups but reports tp_rank and dp_rank swapped (tp_rank = rank // tp_size).

The groups work, but code that picks its batch or shard from the reported coordinates
gets the wrong one.

WORLD_SIZES: 4
EXPECT: build_groups.*\(tp_rank, dp_rank\) is \[0, 1\], expected \[1, 0\].*hint:.*tp_rank = rank % T
CLASS: values
ONLY: build_groups
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "build_groups": [
        (r'''    tp_rank, dp_rank = me % tp_size, me // tp_size
''',
         r'''    tp_rank, dp_rank = me // tp_size, me % tp_size
'''),
        (r'''        if d == dp_rank:
''',
         r'''        if d == me // tp_size:
'''),
        (r'''        if t == tp_rank:
''',
         r'''        if t == me % tp_size:
'''),
    ],
}
