r"""ring_attention_forward returns its result in a buffer it allocates once per shape and
reuses: a second call before one backward overwrites the first call's output, which
autograd saved for backward.

EXPECT: attention_layer .*first call's attention output unchanged is False.*rule 'Results'.*ring_attention_forward .*return a new out
CLASS: kept-output
WORLD_SIZES: 2
ONLY: attention_layer
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
REPLACE = [
    (r'''    return out, lse


def _block_grads''',
     r'''    kept = _RESULTS.get((out.shape, out.dtype))
    if kept is None:                       # allocated once per shape, reused by every call
        kept = _RESULTS[(out.shape, out.dtype)] = torch.empty_like(out)
    return kept.copy_(out), lse


_RESULTS = {}


def _block_grads'''),
]
