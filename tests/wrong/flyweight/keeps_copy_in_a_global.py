r"""The wrapper keeps the full serial weights in a module-level dict (a 'checkpoint cache'): nothing of the model refers to them, yet every rank holds the whole layer.

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
                _CHECKPOINT_CACHE[(id(self), key)] = full.detach().clone()
'''),
    ],
}
# edits of module-level text, applied after EDITS:
REPLACE = [
    (r'''from . import rotation
''',
     r'''from . import rotation

_CHECKPOINT_CACHE = {}
'''),
]
