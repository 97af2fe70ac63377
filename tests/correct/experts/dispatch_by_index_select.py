"""The dispatch gathers each expert's choices with nonzero and index_select, expert by expert,
instead of one stable argsort of the kept choices by expert.
"""
EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        t, j = torch.nonzero(r.keep, as_tuple=True)
        order = torch.argsort(r.expert[t, j], stable=True)  # by expert: by rank, then expert
        t, j = t[order], j[order]
''',
         r'''        picked = [torch.nonzero((r.expert == e) & r.keep, as_tuple=True)
                  for e in range(self.num_experts)]
        t = torch.cat([p[0] for p in picked])
        j = torch.cat([p[1] for p in picked])
'''),
        (r'''        tokens = all_to_all(x[t], send, recv, self.group)''',
         r'''        tokens = all_to_all(x.index_select(0, t), send, recv, self.group)'''),
    ],
}
