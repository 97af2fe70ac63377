r"""ring_attention_forward returns a fresh out but its lse in a buffer kept per shape: a second
call before one backward overwrites the first call's lse, which autograd saved.

EXPECT: attention_layer .*modified by an inplace operation
SAYS: exception.saved-changed
CLASS: kept-output
WORLD_SIZES: 2
ONLY: attention_layer
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
REPLACE = [
    (r'''    return out, lse


def _block_grads''',
     r'''    kept = _LSE.get((lse.shape, lse.dtype))
    if kept is None:
        kept = _LSE[(lse.shape, lse.dtype)] = torch.empty_like(lse)
    return out, kept.copy_(lse)


_LSE = {}


def _block_grads'''),
]
