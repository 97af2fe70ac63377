r"""Backward allocates its gradient accumulators once and zeroes them at every step, while the
previous step's send of the same buffers may still be in flight.

EXPECT: was written to before its work was waited.*rule 'Send buffers'
CLASS: send-buffer
WORLD_SIZES: 2
ONLY: ring_attention_backward
RULE: Send buffers
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_backward": [
        (r'''    sending = None                                               # accumulators in flight
    for step in range(world):
''',
         r'''    sending = None                                               # accumulators in flight
    dk_s, dv_s = torch.zeros_like(k), torch.zeros_like(v)        # reused at every step
    for step in range(world):
'''),
        (r'''        dk_s, dv_s = torch.zeros_like(k), torch.zeros_like(v)
        if not causal or s == rank:
''',
         r'''        dk_s.zero_()
        dv_s.zero_()
        if not causal or s == rank:
'''),
    ],
}
