r"""The wrapper keeps the full serial weights in a plain dict (for full_state_dict, say): the
parameters are shards, but every rank still holds the whole layer.

EXPECT: TransformerLM .*(memory/bytes held besides parameters and buffers|forward/bytes held after forward besides activations) is \d+, expected at most .*keep only your shard
CLASS: memory
WORLD_SIZES: 2
ONLY: TransformerLM
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
EDITS = {
    "FlyweightWrapper#1.__init__": [
        (r'''                dist.broadcast(full, src=src, group=group)   # everyone starts from rank 0
''',
         r'''                dist.broadcast(full, src=src, group=group)   # everyone starts from rank 0
                self.__dict__.setdefault("serial_weights", {})[key] = full.detach().clone()
'''),
    ],
}
