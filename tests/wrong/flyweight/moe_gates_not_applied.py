r"""Adds each expert's output without its gate: the combine weights are not applied.

EXPECT: flyweight\.MoE .*forward/output max abs error.*gate\[t, j\] \* expert\(x\[t\]\)
CLASS: values
WORLD_SIZES: 2
ONLY: MoE

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# each expert's output added as it is: y sums the experts, not their gated outputs
EDITS = {
    "_MoE.partial": [
        (r'''            y = y.index_add(0, t, gate[t, j].unsqueeze(1) * out)
''',
         r'''            y = y.index_add(0, t, out)
'''),
    ],
}
