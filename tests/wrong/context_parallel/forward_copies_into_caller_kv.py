r"""ring_attention_forward copies each arriving block into the caller's k and v (k.copy_(...))
instead of giving it a name of its own: the output is right, but the caller's k and v (which
RingAttention saves for backward) now hold another rank's block.

EXPECT: FAIL +\[E8\.2\] context_parallel\.ring_attention .*forward/the caller's q, k, v the call wrote into is 'k, v', expected 'none'.*hint: rule 'New tensors'
CLASS: in-place
WORLD_SIZES: 2
ONLY: ring_attention
RULE: New tensors

Seen in a review of E8 (issue 47): before, forward passed and backward failed, blaming the
gradient accumulators.
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''            k, v = incoming[0].wait(), incoming[1].wait()        # the block used is dropped
''',
         r'''            k.copy_(incoming[0].wait())                          # the next block, in place
            v.copy_(incoming[1].wait())
'''),
    ],
}
