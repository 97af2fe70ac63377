"""The stub's design keeps nn.MultiheadAttention's bool masks bool: it combines them with |
(masked if either says so) and turns them into -inf only where the scores are made.
"""
BASE = "simple"
EDITS = {
    "_additive": [
        (r'''    """A boolean mask (True = may not attend) as 0 / -inf; a float mask as it is."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
            mask, float("-inf"))
    return mask.to(dtype)
''',
         r'''    """A boolean mask (True = may not attend) as it is; a float mask in the scores' dtype."""
    return mask if mask.dtype == torch.bool else mask.to(dtype)
'''),
    ],
    "FlyweightWrapper._attention": [
        (r'''            mask = padding if mask is None else mask + padding
''',
         r'''            if mask is None or mask.dtype == padding.dtype:
                mask = padding if mask is None else (
                    mask | padding if mask.dtype == torch.bool else mask + padding)
            else:   # one bool, one float: the bool one as 0 / -inf
                bool_mask, float_mask = (mask, padding) if mask.dtype == torch.bool else (padding, mask)
                mask = float_mask.masked_fill(bool_mask, float("-inf"))
'''),
    ],
    "_MultiheadAttention.partial": [
        (r'''            scores = scores + mask
''',
         r'''            scores = (scores.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool
                      else scores + mask)
'''),
    ],
}
