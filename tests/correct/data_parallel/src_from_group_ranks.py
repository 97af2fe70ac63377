"""DataParallel reads the broadcast source from the group's list of global ranks
(dist.get_process_group_ranks(group)[0]) instead of dist.get_global_rank(group, 0).
"""
EDITS = {
    "DataParallel.__init__": [
        (r'''        src = dist.get_global_rank(group, 0) if group is not None else 0
''',
         r'''        src = dist.get_process_group_ranks(group)[0] if group is not None else 0
'''),
    ],
}
