"""Split by chunk(); AllGather's backward by chunk(); gathers through all_gather_into_tensor.
REQUIRES: all_gather_into_tensor
"""
EDITS = {
    "AllGather.backward": [
        (r'''        return grad.narrow(ctx.dim, ctx.rank * ctx.size, ctx.size).contiguous(), None, None''',
         r'''        world = grad.shape[ctx.dim] // ctx.size
        return grad.chunk(world, dim=ctx.dim)[ctx.rank].contiguous(), None, None'''),
    ],
    "Split.forward": [
        (r'''        size = x.shape[dim] // world
        return x.narrow(dim, rank * size, size).contiguous()''',
         r'''        return x.chunk(world, dim=dim)[rank].contiguous()'''),
    ],
    "Split.backward": [
        (r'''        parts = [torch.empty_like(grad) for _ in range(world)]
        dist.all_gather(parts, grad.contiguous(), group=ctx.group)
        return torch.cat(parts, dim=ctx.dim), None, None''',
         r'''        g = grad.movedim(ctx.dim, 0).contiguous()
        out = g.new_empty((world * g.shape[0],) + tuple(g.shape[1:]))
        dist.all_gather_into_tensor(out, g, group=ctx.group)
        return out.movedim(0, ctx.dim), None, None'''),
    ],
}
