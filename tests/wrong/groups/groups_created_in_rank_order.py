r"""build_groups creates this rank's own TP group first and the others after, so ranks call dist.new_group in different orders.

dist.new_group is collective over the whole job and must be called in the same order
everywhere: the groups get mismatched (a hang, or ranks wired to the wrong peers).

WORLD_SIZES: 4
EXPECT: groups\.build_groups.*(deadlock.*'build_groups'|new_group calls, the same on every rank is 'no: rank).*hint: rule 'Layout': dist\.new_group is collective over the WHOLE job
CLASS: deadlock
ONLY: build_groups
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "build_groups": [
        (r'''    for d in range(dp_size):
''',
         r'''    for d in [dp_rank] + [d for d in range(dp_size) if d != dp_rank]:   # mine first
'''),
    ],
}
