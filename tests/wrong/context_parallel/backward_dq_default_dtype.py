r"""Backward accumulates dq in torch.zeros(q.shape, device=...) without dtype=: float32, the
default dtype, whatever q's.

EXPECT: backward/grad q .*rule 'Dtypes'
SAYS: value.float32
CLASS: dtype
WORLD_SIZES: 2
ONLY: ring_attention_backward
RULE: Dtypes
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_backward": [
        (r'''    dq = torch.zeros_like(q)
''',
         r'''    dq = torch.zeros(q.shape, device=q.device)
'''),
    ],
}
