r"""The wrapper makes each shard a fresh nn.Parameter, which requires grad whatever the full
parameter did: a frozen (pretrained) layer trains on every rank.

EXPECT: flyweight\.MnistCNN .*structure/frozen parameters \(requires_grad=False\) is \[\], expected \['conv1\.bias', 'conv1\.weight'\].*hint: rule 'Frozen and unused'
CLASS: values frozen
RULE: Frozen and unused
WORLD_SIZES: 2
ONLY: MnistCNN
"""
BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "FlyweightWrapper.__init__": [
        (r'''                        nn.Parameter(shard, requires_grad=full.requires_grad))
''',
         r'''                        nn.Parameter(shard))
'''),
    ],
}
