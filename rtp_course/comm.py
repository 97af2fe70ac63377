"""Exercise E2: the communication functions of Megatron-style tensor parallelism.

Notebook: notebooks/03_tp_communication.ipynb. Check: `rtp-course check comm`.
Tasks (each TODO below says its task; the notebook section of that number teaches it):

    E2.1  section 2: `Duplication`, `AllReduce`, `duplicate`, `all_reduce`
    E2.2  section 3: `AllGather`, `Split`, `all_gather`, `split`

Tensor parallelism splits a layer's weights across the N ranks of a group.
Every rank sees the SAME input activations, and the autograd graph must carry
the right communication in each direction. Megatron-LM names two functions:

    f  (Duplication): forward  y = x                 (x is already replicated)
                      backward dx = sum_r dy_r       (ALL-REDUCE)
    g  (AllReduce):   forward  y = sum_r x_r         (ALL-REDUCE of partial sums)
                      backward dx_r = dy             (identity)

Why f's backward sums: the replicated x feeds a different weight shard on each
rank, so x influences the loss through every rank's branch; the chain rule
adds those contributions: dL/dx = sum_r dL/dx|_r.
Why g's backward is the identity: y = x_0 + ... + x_{N-1}, so dy/dx_r = I, and
dL/dy is the same on every rank because y (and everything after it) is replicated.

Two more pairs move a tensor split along a dimension `dim`:

    AllGather: forward  y = cat([x_0, ..., x_{N-1}], dim)     (ALL-GATHER)
               backward dx_r = dy[r-th slice along dim]        (no communication)
    Split:     forward  y = x[r-th slice along dim]            (no communication)
               backward dx = cat([dy_0, ..., dy_{N-1}], dim)   (ALL-GATHER)

"The r-th slice" of a dimension of size S is [r*S/N, (r+1)*S/N), with r the
rank WITHIN `group` (dist.get_rank(group)) and N = dist.get_world_size(group).

Rules your code must follow (the checker tests each one).
Course-wide rules (rtp_course/course/rules.py, notebook 01): 'Device', 'Contiguity',
'Dtypes'.
* Results: what each class's docstring says, for every group size (with one rank
  the communication is trivial and the formulas still hold), also when a function
  is called again before the first call's backward.
* New tensors: never modify the caller's tensor: collectives work in place, so
  communicate on a copy (x.clone()) or on a fresh buffer. The same holds for
  grad_output. Return new tensors, never a buffer kept for the next call.
* Communication: what each class's docstring lists under "Communication", and
  nothing else; any API of that collective will do (all_gather_single, which torch
  2.13 recommends over its deprecated all_gather_into_tensor, is an all-gather too). Every rank makes the same calls, whatever its data.
* Group: pass `group=group` to every collective; r and N are the group's
  (dist.get_rank(group), dist.get_world_size(group)); its ranks need not be
  consecutive.
* Raises: Split raises ValueError naming the sizes when N does not divide S.

Each class is a torch.autograd.Function (see "Extending torch.autograd" in the
PyTorch docs): forward(ctx, ...) may save what backward needs on ctx;
backward(ctx, grad_output) returns one gradient per forward input (None for
non-tensor inputs such as `dim` and `group`). The lower-case functions are the
forms other modules call.
"""
import torch
import torch.distributed as dist


class Duplication(torch.autograd.Function):
    """f: identity forward, all-reduce (sum) of the gradient in backward.

    forward(ctx, x: [*], group) -> [*] (a view or copy of x)
    backward(ctx, grad [*]) -> (sum over ranks of grad [*], None)
    Communication: forward none; backward one all_reduce of grad's size.
    """

    @staticmethod
    def forward(ctx, x, group=None):
        raise NotImplementedError("[E2.1] Duplication.forward: identity; remember `group` on ctx "
                                  "for backward")

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError("[E2.1] Duplication.backward: all-reduce a CLONE of grad_output "
                                  "over ctx.group and return it (and None for group)")


class AllReduce(torch.autograd.Function):
    """g: all-reduce (sum) in forward, identity in backward.

    forward(ctx, x: [*], group) -> sum over ranks of x [*]
    backward(ctx, grad [*]) -> (grad [*], None)
    Communication: forward one all_reduce; backward none.
    """

    @staticmethod
    def forward(ctx, x, group=None):
        raise NotImplementedError("[E2.1] AllReduce.forward: all-reduce a clone of x over `group`")

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError("[E2.1] AllReduce.backward: the identity (and None for group)")


class AllGather(torch.autograd.Function):
    """Concatenate the ranks' tensors along `dim`; backward keeps this rank's slice.

    forward(ctx, x: [..., n, ...], dim, group) -> [..., N*n, ...] (rank order)
    backward(ctx, grad [..., N*n, ...]) -> (grad's slice r [..., n, ...], None, None)
    The slice backward returns must be contiguous (checked): a narrow() of grad
    is a view with the whole's strides, and this gradient flows on into other
    layers' collectives, which NCCL gives only contiguous memory.
    Communication: forward one all_gather (each rank sends n elements per row);
    backward none.
    """

    @staticmethod
    def forward(ctx, x, dim=-1, group=None):
        raise NotImplementedError("[E2.2] AllGather.forward: dist.all_gather into a list of "
                                  "torch.empty_like(x), then torch.cat along dim")

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError("[E2.2] AllGather.backward: return grad_output.narrow(dim, r*n, n) "
                                  "(contiguous), None, None")


class Split(torch.autograd.Function):
    """Keep this rank's slice along `dim`; backward all-gathers the gradient.

    forward(ctx, x: [..., S, ...], dim, group) -> [..., S/N, ...]
    backward(ctx, grad [..., S/N, ...]) -> (all-gathered grad [..., S, ...], None, None)
    S must be divisible by N: raise ValueError naming the sizes otherwise.
    Communication: forward none; backward one all_gather.
    """

    @staticmethod
    def forward(ctx, x, dim=-1, group=None):
        raise NotImplementedError("[E2.2] Split.forward: x.narrow(dim, r*S//N, S//N).contiguous()")

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError("[E2.2] Split.backward: all-gather the gradient slices along dim")


def duplicate(x, group=None):
    """f: Duplication.apply(x, group)."""
    return Duplication.apply(x, group)


def all_reduce(x, group=None):
    """g: AllReduce.apply(x, group)."""
    return AllReduce.apply(x, group)


def all_gather(x, dim=-1, group=None):
    """AllGather.apply(x, dim, group)."""
    return AllGather.apply(x, dim, group)


def split(x, dim=-1, group=None):
    """Split.apply(x, dim, group)."""
    return Split.apply(x, dim, group)
