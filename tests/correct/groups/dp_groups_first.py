"""build_groups creates the DP groups first, then the TP groups: another order, the same on
every rank, which is all dist.new_group asks."""
EDITS = {
    "build_groups": [
        (r'''    for d in range(dp_size):
        created = dist.new_group([ranks[d * tp_size + t] for t in range(tp_size)])
        if d == dp_rank:
            tp_group = created
    for t in range(tp_size):
        created = dist.new_group([ranks[d * tp_size + t] for d in range(dp_size)])
        if t == tp_rank:
            dp_group = created''',
         r'''    for t in range(tp_size):
        created = dist.new_group([ranks[d * tp_size + t] for d in range(dp_size)])
        if t == tp_rank:
            dp_group = created
    for d in range(dp_size):
        created = dist.new_group([ranks[d * tp_size + t] for t in range(tp_size)])
        if d == dp_rank:
            tp_group = created'''),
    ],
}
