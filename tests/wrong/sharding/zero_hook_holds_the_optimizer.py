r"""ShardedOptimizer's gradient hooks hold the optimizer itself (a closure over it): parameter,
hook, optimizer and parameter make a cycle through torch's C++ hook table that the garbage
collector cannot break, so a dropped optimizer keeps its model, gradients and state alive.

EXPECT: sharding\.ShardedOptimizer .*memory/bytes held besides the parameters.* is \d+, expected at most \d+.*hint: rule 'Memory'.*weakref\.ref\(self\)
CLASS: memory
WORLD_SIZES: 2
ONLY: ShardedOptimizer
"""

# The bug, as edits of the correct alternative that overlaps the reduce-scatters with
# backward (tests/correct/sharding/zero_reduce_scatter_in_hooks.py), less its weak reference:
import runpy
from pathlib import Path

_HOOKS = runpy.run_path(str(Path(__file__).resolve().parents[2] / "correct" / "sharding"
                            / "zero_reduce_scatter_in_hooks.py"))


def _strong(new):
    return (new.replace("_reducer(weakref.ref(self), i)", "_reducer(self, i)")
            .replace("def _reducer(ref, i):", "def _reducer(opt, i):")
            .replace("        opt = ref()\n", ""))


EDITS = {key: [(old, _strong(new)) for old, new in pairs] for key, pairs in _HOOKS["EDITS"].items()}
REPLACE = [(old, _strong(new)) for old, new in _HOOKS.get("REPLACE", [])]
