r"""The wrapper keeps the full serial weights as non-persistent buffers: not parameters, not in the state dict, but held by every rank all the same.

EXPECT: TransformerLM .*(memory/bytes held besides parameters and buffers|forward/bytes held after forward besides activations) is \d+, expected at most .*keep only your shard
CLASS: memory
WORLD_SIZES: 2
ONLY: TransformerLM
RULE: Memory
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
EDITS = {
    "FlyweightWrapper#1.__init__": [
        (r'''                dist.broadcast(full, src=src, group=group)   # everyone starts from rank 0
''',
         r'''                dist.broadcast(full, src=src, group=group)   # everyone starts from rank 0
                self.register_buffer(f"full_{key.replace('.', '_')}", full.detach().clone(),
                                     persistent=False)
'''),
    ],
}
