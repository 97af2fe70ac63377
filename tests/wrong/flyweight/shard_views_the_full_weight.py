r"""The wrapper keeps nn.Parameter(full[a:b]) as its shard: no copy, but the view keeps the
whole full weight alive on every rank.

EXPECT: flyweight\.TransformerLM .*(memory/bytes held besides parameters and buffers|forward/bytes held after forward besides activations) is \d+, expected at most .*keep only your shard
CLASS: memory view-shard
WORLD_SIZES: 2
ONLY: TransformerLM
"""
BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "FlyweightWrapper.__init__": [
        (r'''                shard = self._take(full, *self.shard_ranges(self.rank)[key]).clone()
''',
         r'''                dim, spans = self.shard_ranges(self.rank)[key]
                shard = (full.narrow(dim, spans[0][0], spans[0][1] - spans[0][0])   # no copy
                         if len(spans) == 1 else self._take(full, dim, spans))
'''),
    ],
}
