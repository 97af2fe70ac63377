r"""ring_attention_backward's dk leaves out the 1/sqrt(d) of the scores: dk = dS^T q.

EXPECT: FAIL +\[E8\.4\] context_parallel\.ring_attention_backward .*backward/grad k .*every entry is 2\.236 x the expected value \(2\.236 = sqrt\(head_dim\), head_dim = 5: the 1/sqrt\(d\) scale left out\).*hint: the scores are q k\^T / sqrt\(d\)
CLASS: values
WORLD_SIZES: 2
ONLY: ring_attention_backward

Seen in a review of E8 (issue 47): with head_dim 4 the checker read the factor 2 as the world
size ("a sum over the ranks where their mean is wanted").
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "_block_grads": [
        (r'''    return (ds @ k) * scale, (ds.transpose(-2, -1) @ q) * scale, dv
''',
         r'''    return (ds @ k) * scale, ds.transpose(-2, -1) @ q, dv
'''),
    ],
}
