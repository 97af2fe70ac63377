r"""FullyShardedDataParallel gathers each unit before its forward but never frees it after:
every unit stays gathered until backward, the whole model on every rank (DDP's memory).

EXPECT: sharding\.FullyShardedDataParallel .*forward/bytes held after forward besides shards and activations is \d+, expected at most .*free each unit's gathered storage in its forward hook
CLASS: memory
RULE: Memory
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit._after_forward": [
        (r'''    def _after_forward(self, module, args, output):
        self.free()
''',
         r'''    def _after_forward(self, module, args, output):
        pass
'''),
    ],
}
