r"""The attention turns a bool mask into a bias with torch.zeros(shape, device=...), without
dtype=: a float32 bias, which promotes half-precision scores, and the output, to float32 (in
float64 it is promoted the other way and goes unseen).

EXPECT: flyweight\.MultiheadAttention_bfloat16 .*(forward/output has dtype float32, expected bfloat16|raised RuntimeError: expected scalar type Float but found BFloat16).*hint: rule 'Dtypes'
CLASS: dtype
WORLD_SIZES: 2
ONLY: MultiheadAttention_bfloat16
HIDDEN: yes
"""
BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "_additive": [
        (r'''        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
            mask, float("-inf"))
''',
         r'''        return torch.zeros(mask.shape, device=mask.device).masked_fill(mask, float("-inf"))
'''),
    ],
}
