r"""FullyShardedDataParallel keeps each unit's full flat weights as a storage (a
torch.UntypedStorage, no tensor) in a closure, 'to restore them': every rank holds the whole
model.

EXPECT: sharding\.FullyShardedDataParallel .*(forward/bytes held after forward besides shards and activations|memory/bytes held besides shards, gradients, optimizer state and buffers) is \d+, expected at most
CLASS: memory
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit.__init__": [
        (r'''        self.numel = flat.numel()
''',
         r'''        self.numel = flat.numel()
        self.restore = (lambda kept: (lambda: kept))(flat.untyped_storage())
'''),
    ],
}
