r"""Forward all-gathers every rank's k and v up front and loops over them: right values, but a
collective where the blocks must rotate, and every block held at once.

EXPECT: ring_attention  \(fails at world size 1, 2\)\s+world size 2, phase forward: .*all_gather.*rule 'Point-to-point only'
CLASS: traffic
WORLD_SIZES: 1 2
ONLY: ring_attention
RULE: Point-to-point only
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''    for i in range(world):
        s = (rank - i) % world                                   # whose block is in hand
        incoming = None
        if i < world - 1:                                        # start moving it on, THEN compute
            incoming = (rotate_async(k, "clockwise", group), rotate_async(v, "clockwise", group))
''',
         r'''    ks = [torch.empty_like(k) for _ in range(world)]
    vs = [torch.empty_like(v) for _ in range(world)]
    dist.all_gather(ks, k.contiguous(), group=group)
    dist.all_gather(vs, v.contiguous(), group=group)
    for i in range(world):
        s = (rank - i) % world                                   # whose block is in hand
        k, v = ks[s], vs[s]
        incoming = None
'''),
    ],
}
