r"""from_serial makes each shard a fresh nn.Parameter, which requires grad whatever the serial
parameter did: a frozen (pretrained) embedding table trains on every rank.

EXPECT: parallelize_transformer_bert .*structure/frozen parameters \(requires_grad=False\) is \[\], expected \['pos_emb\.weight'\].*hint: rule 'Frozen and unused'
CLASS: values frozen
RULE: Frozen and unused
WORLD_SIZES: 2
ONLY: parallelize_transformer_bert
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelEmbedding.from_serial": [
        (r'''        return _frozen_like(layer, weight=embedding.weight)
''',
         r'''        return layer
'''),
    ],
}
