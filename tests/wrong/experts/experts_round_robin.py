r"""Experts placed round-robin (rank r holds r, r+N, ...): right outputs, not the documented layout.

EXPECT: ExpertParallelMoE.*rule 'Layout'
CLASS: values
RULE: Layout
WORLD_SIZES: 2
"""

EDITS = {
    "ExpertParallelMoE.__init__": [
        (r'''        self.experts = nn.ModuleList(copy.deepcopy(moe.experts[self.first + i])
''',
         r'''        self.experts = nn.ModuleList(copy.deepcopy(moe.experts[rank + i * world])
'''),
    ],
    "ExpertParallelMoE.forward": [
        (r'''        order = torch.argsort(r.expert[t, j], stable=True)  # by expert: by rank, then expert
        t, j = t[order], j[order]
        counts = torch.bincount(r.expert[t, j], minlength=self.num_experts)
        counts = counts.view(world, self.num_local)
''',
         r'''        e = r.expert[t, j]
        order = torch.argsort((e % world) * self.num_local + e // world, stable=True)
        t, j = t[order], j[order]
        counts = torch.bincount(r.expert[t, j], minlength=self.num_experts)
        counts = counts.view(self.num_local, world).t().contiguous()
'''),
    ],
}
