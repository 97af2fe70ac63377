"""build_groups where each rank creates only the two groups it belongs to, with
dist.new_group(use_local_synchronization=True), which only the members call.
"""
EDITS = {
    "build_groups": [
        (r'''    tp_group = dp_group = None
    for d in range(dp_size):
        created = dist.new_group([ranks[d * tp_size + t] for t in range(tp_size)])
        if d == dp_rank:
            tp_group = created
    for t in range(tp_size):
        created = dist.new_group([ranks[d * tp_size + t] for d in range(dp_size)])
        if t == tp_rank:
            dp_group = created
''',
         r'''    tp_group = dist.new_group([dp_rank * tp_size + t for t in range(tp_size)],
                              use_local_synchronization=True)
    dp_group = dist.new_group([d * tp_size + tp_rank for d in range(dp_size)],
                              use_local_synchronization=True)
'''),
    ],
}
