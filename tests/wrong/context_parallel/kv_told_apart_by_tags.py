r"""ring_attention_forward posts its own batch of four transfers and tells k from v by tag
(tag 0 for k, 1 for v), posting v's receive before k's: gloo matches tags, NCCL ignores them
and matches by posting order, so on NCCL the blocks arrive swapped (the checker does as NCCL).

EXPECT: FAIL +\[E8\.2\] context_parallel\.ring_attention .*forward/output .*rank \d told its transfers apart by tag \((isend|irecv) with tag=1 at context_parallel\.py:\d+ in ring_attention_forward\): NCCL ignores tags
SAYS: comm.tags
CLASS: values device
WORLD_SIZES: 2
ONLY: ring_attention

Seen in a review of E8 (issue 47): before, the student saw a wrong output and a hint about the
ring's schedule.
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''            incoming = (rotate_async(k, "clockwise", group), rotate_async(v, "clockwise", group))
        if not causal:
''',
         r'''            dst, src = ring_peers("clockwise", group)
            next_k = torch.empty(k.shape, dtype=k.dtype, device=k.device)
            next_v = torch.empty(v.shape, dtype=v.dtype, device=v.device)
            incoming = (dist.batch_isend_irecv([
                dist.P2POp(dist.isend, k.contiguous(), dst, group, tag=0),
                dist.P2POp(dist.isend, v.contiguous(), dst, group, tag=1),
                dist.P2POp(dist.irecv, next_v, src, group, tag=1),    # the tags tell them apart
                dist.P2POp(dist.irecv, next_k, src, group, tag=0)]), next_k, next_v)
        if not causal:
'''),
        (r'''            k, v = incoming[0].wait(), incoming[1].wait()        # the block used is dropped
''',
         r'''            [w.wait() for w in incoming[0]]                      # every handle; none kept
            k, v = incoming[1], incoming[2]
'''),
    ],
}
# edits of module-level text, applied after EDITS:
REPLACE = [
    (r'''from .rotation import ring_all_gather, rotate_async
''',
     r'''from .rotation import ring_all_gather, ring_peers, rotate_async
'''),
]
