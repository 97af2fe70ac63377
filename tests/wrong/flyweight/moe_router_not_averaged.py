r"""Counts the router among the wrapper's parameters: no averaging hook, each rank its own gradient.

EXPECT: flyweight\.MoE .*backward/grad router\.\w+ \(replicated parameter\) max abs error.*mean over the ranks
CLASS: forgotten-collective
WORLD_SIZES: 2
ONLY: MoE

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# every parameter below a wrapper taken for a shard, the MoE's router included.
EDITS = {
    "RotatedTensorParallel.__init__": [
        (r'''        sharded = {id(p) for w in self._wrappers().values() for p in w._shard_parameters()}
''',
         r'''        sharded = {id(p) for w in self._wrappers().values() for p in w.parameters()}
'''),
    ],
}
