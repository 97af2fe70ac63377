r"""ParallelSelfAttention gives rank r the heads r, r+N, r+2N, ... (round robin) instead of the block [r*H/N, (r+1)*H/N).

The output and input gradients are right (the heads are just dealt out differently),
but every rank holds the wrong rows of Wq/Wk/Wv and columns of Wo: a shard check fails.

EXPECT: ParallelSelfAttention  .*structure/q_proj\.weight.*hint: rank r owns heads \[r\*H/N, \(r\+1\)\*H/N\)
CLASS: values
WORLD_SIZES: 2
ONLY: ParallelSelfAttention
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelSelfAttention.from_serial": [
        (r'''        w = attention_weights(module)
        layer = cls(w.wq.shape[1], w.num_heads, w.bq is not None, w.causal, group,
''',
         r'''        w = attention_weights(module)
        world, _ = _tp(group)
        heads, dim = w.num_heads, w.wq.shape[1] // w.num_heads
        order = [h for r in range(world) for h in range(r, heads, world)]   # deal heads out
        rows = lambda t: None if t is None else t.reshape(heads, dim, *t.shape[1:])[order].reshape(t.shape)
        w = w._replace(wq=rows(w.wq), bq=rows(w.bq), wk=rows(w.wk), bk=rows(w.bk), wv=rows(w.wv),
                       bv=rows(w.bv), wo=w.wo.reshape(-1, heads, dim)[:, order].reshape(w.wo.shape))
        layer = cls(w.wq.shape[1], w.num_heads, w.bq is not None, w.causal, group,
'''),
    ],
}
