r"""Runs every choice through its expert, the ones the capacity drops included.

EXPECT: flyweight\.MoE .*forward/output max abs error.*KEPT choices
CLASS: values
WORLD_SIZES: 2
ONLY: MoE

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# the capacity's drops live in `keep`: without it every choice adds its expert's output
EDITS = {
    "_MoE.partial": [
        (r'''            t, j = torch.nonzero((extra["expert"] == e) & extra["keep"], as_tuple=True)
''',
         r'''            t, j = torch.nonzero(extra["expert"] == e, as_tuple=True)
'''),
    ],
}
