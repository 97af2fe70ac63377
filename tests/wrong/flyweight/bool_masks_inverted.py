r"""The attention hands nn.MultiheadAttention's bool masks to scaled_dot_product_attention as
they are: SDPA reads True as "attend", the module as "masked", so every mask is inverted.

EXPECT: flyweight\.MultiheadAttention_batch_first .*forward/output .*it equals what the bool masks read the other way round gives.*hint: nn\.MultiheadAttention reads a bool mask
CLASS: values
WORLD_SIZES: 2
ONLY: MultiheadAttention_batch_first
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
EDITS = {
    "_additive": [
        (r'''    """A boolean mask (True = may not attend) as 0 / -inf; a float mask as it is."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
            mask, float("-inf"))
    return mask.to(dtype)
''',
         r'''    """A boolean mask as it is (scaled_dot_product_attention takes bool masks); a float mask
    in the scores' dtype."""
    return mask if mask.dtype == torch.bool else mask.to(dtype)
'''),
    ],
    "FlyweightWrapper#1._attention": [
        (r'''            mask = padding if mask is None else mask + padding
''',
         r'''            mask = padding if mask is None else (
                mask & padding if mask.dtype == torch.bool else mask + padding)
'''),
    ],
}
