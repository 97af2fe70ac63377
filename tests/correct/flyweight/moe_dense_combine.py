"""The stub's design gives its MoE Function a dense [T, E] matrix of combine weights (the gates
of the kept choices, scattered; 0 elsewhere) in place of the gates and the routing, and runs
each expert on every token, weighted by its column: more compute, no gathers by index.
"""
BASE = "simple"
EDITS = {
    "FlyweightWrapper._experts": [
        (r'''        extra = {"expert": r.expert, "keep": r.keep,
                 "experts": [range(a, a + z) for a, z in zip(self.starts, self.sizes)]}
        y = _RotatedShards.apply(self, extra, 2, tokens, r.gate, *shard)
''',
         r'''        combine = probs.new_zeros(probs.shape).scatter_add(1, r.expert, r.gate * r.keep)
        extra = {"experts": [range(a, a + z) for a, z in zip(self.starts, self.sizes)]}
        y = _RotatedShards.apply(self, extra, 2, tokens, combine, *shard)
'''),
    ],
    "_MoE.partial": [
        (r'''        x, gate = inputs                                   # tokens [T, dim], gates [T, k]
''', r'''        x, combine = inputs                                # tokens [T, dim], weights [T, E]
'''),
        (r'''            t, j = torch.nonzero((extra["expert"] == e) & extra["keep"], as_tuple=True)
''', ""),
        (r'''            h = torch.tanh(F.linear(x[t], p[w + "fc1.weight"], p.get(w + "fc1.bias")))
''', r'''            h = torch.tanh(F.linear(x, p[w + "fc1.weight"], p.get(w + "fc1.bias")))
'''),
        (r'''            y = y.index_add(0, t, gate[t, j].unsqueeze(1) * out)
''', r'''            y = y + combine[:, e:e + 1] * out
'''),
    ],
}
