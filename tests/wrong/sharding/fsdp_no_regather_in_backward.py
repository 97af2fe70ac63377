r"""FullyShardedDataParallel frees each unit after its forward but registers no backward
pre-hook: backward finds the storage autograd's saved views point to freed, and nothing
gathers it again.

EXPECT: sharding\.FullyShardedDataParallel .*backward.*raised RuntimeError.*gather it AGAIN
CLASS: forgotten-collective
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit.__init__": [
        (r'''        module.register_full_backward_pre_hook(self._before_backward)
''',
         r''''''),
    ],
}
