r"""The wrapper zeroes the padding row of its Embedding shard, as a fresh nn.Embedding starts:
a pretrained table's padding row (which need not be zero) is lost.

EXPECT: flyweight\.Embedding .*(init/weight shard|forward/output) max abs error.*(start from rank 0's weights|padding row included as it is)
CLASS: padding pretrained
WORLD_SIZES: 2
ONLY: Embedding
"""
BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "FlyweightWrapper.__init__": [
        (r'''                shard = self._take(full, *self.shard_ranges(self.rank)[key]).clone()
''',
         r'''                shard = self._take(full, *self.shard_ranges(self.rank)[key]).clone()
                if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                    shard[module.padding_idx] = 0       # as nn.Embedding does
'''),
    ],
}
