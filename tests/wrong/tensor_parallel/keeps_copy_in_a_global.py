r"""ParallelEmbedding.from_serial keeps the serial table in a module-level dict (a "checkpoint
cache"): nothing of the layer refers to it, yet every rank holds the whole table.

EXPECT: ParallelEmbedding .*memory/bytes held besides parameters and buffers is \d+, expected at most .*keep only your shards
CLASS: memory
WORLD_SIZES: 2
ONLY: ParallelEmbedding
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelEmbedding.from_serial": [
        (r'''        return _frozen_like(layer, weight=embedding.weight)
''',
         r'''        _CHECKPOINT[id(layer)] = embedding.weight.detach().clone()
        return _frozen_like(layer, weight=embedding.weight)
'''),
    ],
}
# edits of module-level text, applied after EDITS:
REPLACE = [
    (r'''from . import comm
''',
     r'''from . import comm

_CHECKPOINT = {}
'''),
]
