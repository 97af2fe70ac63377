"""build_groups names the backend of each group: the default group's (dist.get_backend()) for
the TP groups, "gloo" for the DP groups, as a laptop's notebook runs them; a group's backend
is the job's business, not a rule (on CPU the checker relays every group)."""
REPLACE = [
    ("        created = dist.new_group([ranks[d * tp_size + t] for t in range(tp_size)])",
     "        created = dist.new_group([ranks[d * tp_size + t] for t in range(tp_size)],\n"
     "                                 backend=dist.get_backend())"),
    ("        created = dist.new_group([ranks[d * tp_size + t] for d in range(dp_size)])",
     "        created = dist.new_group([ranks[d * tp_size + t] for d in range(dp_size)],\n"
     "                                 backend=\"gloo\")"),
]
