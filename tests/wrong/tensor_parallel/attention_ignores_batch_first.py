r"""ParallelSelfAttention always reads batch-first input, whatever the module it replaces said:
a sequence-first nn.MultiheadAttention's [L, B, E] is taken for [B, S, E].

EXPECT: ParallelSelfAttention_from_MultiheadAttention .*(forward/output|raised).*hint: .*inputs \[L, B, E\] when the module has batch_first=False
CLASS: values batch-first
WORLD_SIZES: 2
ONLY: ParallelSelfAttention_from_MultiheadAttention
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelSelfAttention.forward": [
        (r'''        x = query if self.batch_first else query.transpose(0, 1)        # [B, S, E]
        masked = self.causal or is_causal
        if attn_mask is not None:
            if not _is_causal_mask(attn_mask, x.shape[1]):
                raise NotImplementedError("ParallelSelfAttention: only the causal attn_mask is supported")
            masked = True
''',
         r'''        x = query                                                       # [B, S, E]
        masked = self.causal or is_causal or attn_mask is not None
'''),
        (r'''        y = y if self.batch_first else y.transpose(0, 1)
''',
         r''''''),
    ],
}
