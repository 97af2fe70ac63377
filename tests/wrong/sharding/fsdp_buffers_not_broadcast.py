r"""FSDP broadcasts the parameters from group rank 0 but not the buffers: a rank whose buffers
are its own (drawn at its construction) computes another function.

EXPECT: sharding\.FullyShardedDataParallel .*init/buffer layers\.\d\.scale.*hint: every rank starts from group rank 0's buffers too
CLASS: buffers
RULE: Results
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "FullyShardedDataParallel.__init__": [
        (r'''            for t in list(module.parameters()) + list(module.buffers()):
''',
         r'''            for t in module.parameters():
'''),
    ],
}
