r"""GPipe receives the gradients into a buffer in the default float32.

EXPECT: gpipe.*(a receive allocated with another shape or dtype than what its peer sends|a receive was allocated with the wrong shape or dtype)
CLASS: dtype
RULE: Dtypes
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug. Which rank reports it
depends on which one the size mismatch kills first: either hint names the receive's dtype.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''    for x, out in kept:
        grad = None if stage.is_last else torch.empty_like(out)
''',
         r'''    for x, out in kept:
        grad = None if stage.is_last else torch.empty(out.shape, device=out.device)
'''),
    ],
}
