"""AllGather and Split's backward through dist.all_gather_single (torch 2.13's recommended API):
one flat buffer gathered along dim 0, then cut and joined along `dim`.
REQUIRES: all_gather_single
"""
EDITS = {
    "AllGather.forward": [
        (r'''        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)''',
         r'''        flat = x.new_empty((world,) + tuple(x.shape))
        dist.all_gather_single(flat, x.contiguous().unsqueeze(0), group=group)
        return torch.cat(flat.unbind(0), dim=dim)'''),
    ],
    "Split.backward": [
        (r'''        parts = [torch.empty_like(grad) for _ in range(world)]
        dist.all_gather(parts, grad.contiguous(), group=ctx.group)
        return torch.cat(parts, dim=ctx.dim), None, None''',
         r'''        flat = grad.new_empty((world,) + tuple(grad.shape))
        dist.all_gather_single(flat, grad.contiguous().unsqueeze(0), group=ctx.group)
        return torch.cat(flat.unbind(0), dim=ctx.dim), None, None'''),
    ],
}
