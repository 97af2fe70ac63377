r"""build_groups lays ranks out as rank = tp_rank * dp_size + dp_rank: TP groups are strided {t, t+D, ...}, not consecutive.

Each TP group then spans nodes (slow all-reduces on every layer), and the documented
rank -> (tp_rank, dp_rank) map is broken: a rank fed replica dp_rank's batch sits in
the wrong replica.

WORLD_SIZES: 4
EXPECT: build_groups.*structure/tp_group ranks is \[0, 2\], expected \[0, 1\].*hint:.*consecutive ranks
CLASS: values
ONLY: build_groups
RULE: Layout
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "build_groups": [
        (r'''    tp_rank, dp_rank = me % tp_size, me // tp_size
''',
         r'''    tp_rank, dp_rank = me // dp_size, me % dp_size
'''),
        (r'''        created = dist.new_group([ranks[d * tp_size + t] for t in range(tp_size)])
''',
         r'''        created = dist.new_group([ranks[t * dp_size + d] for t in range(tp_size)])
'''),
        (r'''        created = dist.new_group([ranks[d * tp_size + t] for d in range(dp_size)])
''',
         r'''        created = dist.new_group([ranks[t * dp_size + d] for d in range(dp_size)])
'''),
    ],
}
