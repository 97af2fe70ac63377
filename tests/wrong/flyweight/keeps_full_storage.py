r"""The wrapper keeps each full weight's storage (full.untyped_storage(), a torch.UntypedStorage) on the module: no tensor refers to the bytes, yet every rank holds the whole layer.

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
                self.__dict__.setdefault("_storages", {})[key] = full.untyped_storage()
'''),
    ],
}
