"""The stub's design with an embedding shard looked up by indexing (weight[ids]) rather than
F.embedding: the same numbers and gradients where there is no padding_idx, and compute all the
same for the overlap rule."""
BASE = "simple"
EDITS = {
    "_Embedding.partial": [
        (r'''    def partial(self, m, inputs, p, index, extra):
        return F.embedding(inputs[0], p["weight"], m.padding_idx, None, 2.0,
                           m.scale_grad_by_freq, False)''',
         r'''    def partial(self, m, inputs, p, index, extra):
        if m.padding_idx is None and not m.scale_grad_by_freq:
            return p["weight"][inputs[0]]
        return F.embedding(inputs[0], p["weight"], m.padding_idx, None, 2.0,
                           m.scale_grad_by_freq, False)'''),
    ],
}
