r"""Duplication's backward all-reduces grad_output in place, as Megatron's copy-to-region does:
the caller's upstream gradient is changed.

EXPECT: Duplication.*upstream grad after.*rule 'New tensors' \(the same holds for grad_output\)
CLASS: in-place
WORLD_SIZES: 2
ONLY: Duplication
"""
EDITS = {
    "Duplication.backward": [
        (r'''        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None''',
         r'''        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None'''),
    ],
}
