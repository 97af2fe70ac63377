r"""The wrapper keeps a copy of each full weight's storage (full.untyped_storage().clone()) inside a closure it stores: neither a tensor nor an attribute refers to the bytes, yet every rank holds the whole layer.

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
                self.__dict__.setdefault("_restore", []).append(
                    (lambda kept: (lambda: kept))(full.untyped_storage().clone()))
'''),
    ],
}
