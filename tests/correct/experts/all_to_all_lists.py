"""AllToAll through dist.all_to_all with lists of tensors, one per rank (uneven sizes: NCCL
sends each with its own size; the checker does the same on CPU), instead of all_to_all_single.
"""
EDITS = {
    "AllToAll.forward": [
        (r'''        out = x.new_empty((sum(output_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), list(output_splits), list(input_splits),
                               group=group)
        return out''',
         r'''        parts = [p.contiguous() for p in x.split(list(input_splits))]
        outs = [x.new_empty((n,) + tuple(x.shape[1:])) for n in output_splits]
        dist.all_to_all(outs, parts, group=group)
        return torch.cat(outs)'''),
    ],
    "AllToAll.backward": [
        (r'''        dx = grad.new_empty((sum(input_splits),) + tuple(grad.shape[1:]))
        dist.all_to_all_single(dx, grad.contiguous(), input_splits, output_splits,
                               group=ctx.group)
        return dx, None, None, None''',
         r'''        parts = [p.contiguous() for p in grad.split(output_splits)]
        outs = [grad.new_empty((n,) + tuple(grad.shape[1:])) for n in input_splits]
        dist.all_to_all(outs, parts, group=ctx.group)
        return torch.cat(outs), None, None, None'''),
    ],
}
