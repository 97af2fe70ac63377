r"""ColumnParallelLinear computes through an autograd Function of its own that keeps the input
on its class (not on ctx) for the weight gradient: a second call before one backward
overwrites it, and the first call's weight gradient uses the second call's input.

EXPECT: ColumnParallelLinear .*backward/grad weight.*what backward needs of a call lives in autograd's context
CLASS: per-call-state
WORLD_SIZES: 2
ONLY: ColumnParallelLinear
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ColumnParallelLinear": [
        (r'''class ColumnParallelLinear(nn.Module):''',
         r'''class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        _Linear.x = x
        ctx.save_for_backward(weight)
        ctx.has_bias = bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        x = _Linear.x
        gw = grad.reshape(-1, grad.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
        gb = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.has_bias else None
        return grad @ weight, gw, gb


class ColumnParallelLinear(nn.Module):'''),
        (r'''        x = comm.duplicate(x, self.group)
        y = F.linear(x, self.weight, self.bias)''',
         r'''        x = comm.duplicate(x, self.group)
        y = _Linear.apply(x, self.weight, self.bias)'''),
    ],
}
