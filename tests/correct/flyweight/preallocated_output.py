"""Forward writes each shard's part into a preallocated output (narrow + copy_) instead of
concatenating the parts at the end."""
BASE = "simple"

EDITS = {
    "FlyweightWrapper._rotating_forward": [
        (r'''            if cat:
                parts[s] = y
            else:''',
         r'''            if cat:
                if parts[0] is None:
                    shape = list(y.shape)
                    shape[self.kind.cat_dim] = sum(self.sizes)
                    parts[0] = y.new_empty(shape)
                parts[0].narrow(self.kind.cat_dim, self.starts[s], self.sizes[s]).copy_(y)
            else:'''),
        (r'''        return torch.cat(parts, self.kind.cat_dim) if cat else total''',
         r'''        return parts[0] if cat else total'''),
    ],
}
