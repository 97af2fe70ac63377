r"""ParallelSelfAttention scales the scores by 1/sqrt(hidden/N), the local q width, instead of 1/sqrt(head_dim).

Wrong with any number of ranks (hidden/N != hidden/H unless N == H).

EXPECT: ParallelSelfAttention  .*forward/output.*hint:.*with d = E/H the serial head dim \(NOT E/N\)
CLASS: values
WORLD_SIZES: 2
ONLY: ParallelSelfAttention
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelSelfAttention.forward": [
        (r'''        y = comm.all_reduce(attention_forward(x, shard), self.group)   # sum over all heads
''',
         r'''        y = comm.all_reduce(_local_attention(x, shard), self.group)
'''),
    ],
}
# edits of module-level text, applied after EDITS:
REPLACE = [
    (r'''
def _is_causal_mask(mask, seq):
''',
     r'''
def _local_attention(x, w):
    """Attention of the local heads, written out: returns the partial ctx @ wo^T."""
    batch, seq, _ = x.shape
    inner = w.wq.shape[0]
    head_dim = inner // w.num_heads

    def heads(t):
        return t.view(batch, seq, w.num_heads, head_dim).transpose(1, 2)

    q = heads(F.linear(x, w.wq, w.bq))
    k = heads(F.linear(x, w.wk, w.bk))
    v = heads(F.linear(x, w.wv, w.bv))
    scores = q @ k.transpose(-2, -1) / math.sqrt(inner)
    if w.causal:
        scores = scores.masked_fill(causal_mask(seq, x.device), float("-inf"))
    context = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, seq, inner)
    return F.linear(context, w.wo)


def _is_causal_mask(mask, seq):
'''),
]
