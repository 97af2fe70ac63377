r"""FullyShardedDataParallel cuts each unit's flat vector in shards of numel // N elements,
without padding: the last elements of a unit whose size N does not divide are lost (a unit
of 506 elements on 3 ranks), and its parameters cannot be put back together.

EXPECT: sharding\.FullyShardedDataParallel +\(fails at world size 3\).*structure/this rank's shard of every unit, in order has shape \(\d+,\), expected \(\d+,\).*padded with zeros at its END
CLASS: uneven
WORLD_SIZES: 3
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit.__init__": [
        (r'''        self.shard = nn.Parameter(own_chunk(flat, rank, world))
''',
         r'''        size = flat.numel() // world
        self.shard = nn.Parameter(flat[rank * size:(rank + 1) * size].clone())
'''),
    ],
}
