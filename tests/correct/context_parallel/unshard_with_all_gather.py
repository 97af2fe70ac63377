"""zigzag_unshard gathers the shards with one dist.all_gather (a collective is allowed there)
instead of E4's ring_all_gather."""
EDITS = {
    "zigzag_unshard": [
        (r'''    pieces = ring_all_gather(x_local, dim=dim, group=group).chunk(2 * world, dim=dim)
''',
         r'''    parts = [torch.empty_like(x_local, memory_format=torch.contiguous_format)
             for _ in range(world)]
    dist.all_gather(parts, x_local.contiguous(), group=group)
    pieces = torch.cat(parts, dim=dim).chunk(2 * world, dim=dim)
'''),
    ],
}
