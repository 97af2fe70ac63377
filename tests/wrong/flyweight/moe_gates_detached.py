r"""Detaches the gates: the router learns from the aux loss alone, not through the experts' outputs.

EXPECT: flyweight\.MoE .*backward/grad input 0 max abs error.*the gates are an input of your Function, never detached
CLASS: values
WORLD_SIZES: 2
ONLY: MoE

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# the Function sees constant gates: no gradient flows back to the router through them
EDITS = {
    "FlyweightWrapper._experts": [
        (r'''        y = _RotatedShards.apply(self, extra, 2, tokens, r.gate, *shard)
''',
         r'''        y = _RotatedShards.apply(self, extra, 2, tokens, r.gate.detach(), *shard)
'''),
    ],
}
