r"""The causal mask of a rank's own block is made with torch.ones(n, n, dtype=torch.bool) and no
device: on a GPU run it is in CPU memory, and masking the scores with it fails there.

EXPECT: made without a device.*hint: rule 'Device'
CLASS: device
WORLD_SIZES: 2
ONLY: ring_attention_causal
RULE: Device
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "_own_mask": [
        (r'''    return torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
''',
         r'''    return torch.ones(n, n, dtype=torch.bool).tril()
'''),
    ],
}
