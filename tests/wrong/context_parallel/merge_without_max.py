r"""merge_blocks weighs each block by exp(lse) without rescaling by the running max: right for
small scores, inf / inf = NaN once a score passes ~709 (float64).

EXPECT: merge_blocks.*large scores/out .*without the running max.*subtract the running max
CLASS: values
WORLD_SIZES: 1 2
ONLY: merge_blocks ring_attention
RULE: Results
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "merge_blocks": [
        (r'''    m = torch.maximum(lse_a, lse_b)                              # the running max
    m = m.masked_fill(m == float("-inf"), 0.0)                   # rows neither block reaches
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)        # each block's sum, rescaled to m
    total = w_a + w_b
    lse = m + torch.log(total)                                   # log 0 = -inf: no key at all
''',
         r'''    w_a, w_b = torch.exp(lse_a), torch.exp(lse_b)                # each block's sum of exp(scores)
    total = w_a + w_b
    lse = torch.log(total)                                       # log 0 = -inf: no key at all
'''),
    ],
}
