r"""AllGather receives into torch.empty(x.shape, device=x.device) buffers, without dtype=:
float32, the default dtype, so a float64 activation comes back in float32.

EXPECT: AllGather .*forward/output dim=-1 has dtype float32, expected float64.*hint: rule 'Dtypes'
CLASS: dtype
RULE: Dtypes
WORLD_SIZES: 2
ONLY: AllGather
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllGather.forward": [
        (r'''        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous(), group=group)
''',
         r'''        parts = [torch.empty(x.shape, device=x.device) for _ in range(world)]
        dist.all_gather(parts, x.to(torch.float32).contiguous(), group=group)
'''),
    ],
}
