r"""After the last hook of a backward, DataParallel all-reduces a "finished" flag over the
whole world ("to be sure every rank is done"): one collective more, on another group than
`group`, within the count a step allows.

EXPECT: DataParallel_subgroups .*all_reduce at data_parallel\.py:\d+ in _on_grad ran on ranks \[0, 1, 2, 3\]; this call belongs to the group of ranks \[0, 2\].*hint: rule 'Group'
CLASS: subgroup traffic wrong-group
RULE: Group
WORLD_SIZES: 4
ONLY: DataParallel_subgroups
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel._on_grad": [
        (r'''        dist.all_reduce(p.grad, group=self.group)
        p.grad /= dist.get_world_size(self.group)
''',
         r'''        dist.all_reduce(p.grad, group=self.group)
        p.grad /= dist.get_world_size(self.group)
        if p is next(q for q in self.module.parameters() if q.requires_grad):  # the last hook
            dist.all_reduce(torch.ones(1, dtype=p.dtype, device=p.device))    # "all done"
'''),
    ],
}
