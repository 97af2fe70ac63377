r"""ParallelSelfAttention masks only when the module it replaces was marked causal, and drops
the attn_mask it is called with: a module not marked causal, called with the causal mask,
attends to the future.

EXPECT: ParallelSelfAttention_from_MultiheadAttention .*forward/output max abs error.*hint: .*the attn_mask it is given applied
CLASS: values module-settings
WORLD_SIZES: 2
ONLY: ParallelSelfAttention_from_MultiheadAttention
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelSelfAttention.forward": [
        (r'''        if attn_mask is not None:
            if not _is_causal_mask(attn_mask, x.shape[1]):
                raise NotImplementedError("ParallelSelfAttention: only the causal attn_mask is supported")
            masked = True
''',
         r''''''),
    ],
}
