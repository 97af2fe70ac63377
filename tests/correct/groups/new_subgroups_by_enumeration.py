"""build_groups with dist.new_subgroups_by_enumeration, which creates every listed group
(in the same order on every rank) and returns this rank's."""
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
            dp_group = created''',
         r'''    tp_group, _ = dist.new_subgroups_by_enumeration(
        [[ranks[d * tp_size + t] for t in range(tp_size)] for d in range(dp_size)])
    dp_group, _ = dist.new_subgroups_by_enumeration(
        [[ranks[d * tp_size + t] for d in range(dp_size)] for t in range(tp_size)])'''),
    ],
}
