r"""ring_attention_forward posts its own batch of four transfers with tags (0 for k, 1 for v),
receives posted in the order of the sends: NCCL ignores the tags and matches by posting order,
which agrees on every rank, so the blocks arrive right (tags are allowed, not relied on)."""
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
                dist.P2POp(dist.irecv, next_k, src, group, tag=0),
                dist.P2POp(dist.irecv, next_v, src, group, tag=1)]), next_k, next_v)
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
