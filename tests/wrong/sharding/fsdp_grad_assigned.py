r"""FSDP assigns the reduce-scattered gradient to the shard's .grad instead of adding it:
a second backward pass without zero_grad (gradient accumulation over micro-batches) keeps
only the last pass's gradient.

EXPECT: FullyShardedDataParallel_accumulated .*gradient shard of every unit, after both backward passes.*rule 'Accumulation'.*never assign it
CLASS: accumulation
WORLD_SIZES: 2
RULE: Accumulation
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit._after_backward": [
        (r'''        if self.shard.grad is None:
            self.shard.grad = grad
        else:
            self.shard.grad += grad
''',
         r'''        self.shard.grad = grad                 # this backward's gradient
'''),
    ],
}
