"""ParallelSelfAttention computes its local heads with F.scaled_dot_product_attention on
the projections' shards, instead of the course's attention_forward helper."""
EDITS = {
    "ParallelSelfAttention.forward": [
        (r'''        shard = AttentionWeights(q.weight, q.bias, k.weight, k.bias, v.weight, v.bias,
                                 o.weight, None, self.local_heads, True, masked)
        y = comm.all_reduce(attention_forward(x, shard), self.group)   # sum over all heads''',
         r'''        batch, seq = x.shape[0], x.shape[1]

        def heads(p):       # [B, S, local heads * d] -> [B, local heads, S, d]
            t = F.linear(x, p.weight, p.bias)
            return t.view(batch, seq, self.local_heads, self.head_dim).transpose(1, 2)

        ctx = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=masked)
        ctx = ctx.transpose(1, 2).reshape(batch, seq, self.local_heads * self.head_dim)
        y = comm.all_reduce(F.linear(ctx, o.weight), self.group)        # sum over all heads'''),
    ],
}
