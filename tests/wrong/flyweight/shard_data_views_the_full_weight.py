r"""The wrapper sets each shard parameter's .data to a slice of the full weight: no copy, but
the view keeps the whole full weight alive on every rank.

EXPECT: flyweight\.TransformerLM .*(memory/bytes held besides parameters and buffers|forward/bytes held after forward besides activations) is \d+, expected at most .*keep only your shard
CLASS: memory view-shard
WORLD_SIZES: 2
ONLY: TransformerLM
"""
BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "FlyweightWrapper.__init__": [
        (r'''                        nn.Parameter(shard, requires_grad=full.requires_grad))
''',
         r'''                        nn.Parameter(shard, requires_grad=full.requires_grad))
                dim, spans = self.shard_ranges(self.rank)[key]
                if len(spans) == 1:                  # the slice itself, no copy
                    module.get_parameter(key).data = full.narrow(dim, spans[0][0],
                                                                 spans[0][1] - spans[0][0])
'''),
    ],
}
