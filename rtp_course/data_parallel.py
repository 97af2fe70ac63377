"""Exercise E1: data parallelism from scratch (a mini DistributedDataParallel).

Notebook: notebooks/02_data_parallelism.ipynb. Check: `rtp-course check data_parallel`.
Tasks (each TODO below says its task; the notebook section of that number teaches it):

    E1.1  section 3: `average_gradients`
    E1.2  section 4: `DataParallel`

The idea. N ranks each hold a full copy of the model and each gets 1/N of the
global batch (rank r gets the r-th contiguous chunk). With a mean loss over an
evenly split batch of B samples,

    L = (1/B) sum_i l_i = (1/N) sum_r L_r,   where L_r is the mean loss of rank r's B/N samples,

so the gradient of the whole batch is the MEAN over ranks of the local gradients:

    dL/dw = (1/N) sum_r dL_r/dw.

One all-reduce (sum) per gradient, then a division by N, makes every rank hold
exactly the gradient serial training would have computed. If every rank also
starts from the same weights, the same optimizer step keeps them identical.

Communication: the constructor broadcasts rank 0's weights (one broadcast per
tensor); forward communicates nothing; backward all-reduces every gradient
(each rank sends and receives about 2 x the gradient's bytes with a ring).

Every function takes an optional process `group` (None: all ranks). Use it for
every collective and for the rank and world size: dist.get_rank(group),
dist.get_world_size(group). A broadcast's `src` is a GLOBAL rank: the global
rank of group rank 0 is dist.get_global_rank(group, 0) (or just 0 when group is None).

Rules your code must follow (the checker tests each one).
Course-wide rules (rtp_course/course/rules.py, notebook 01): 'Device', 'Dtypes'.
* Results: every rank of `group` starts from group rank 0's parameters AND buffers;
  after backward (DataParallel) or average_gradients, every .grad is the mean
  over the ranks of `group`, on every rank.
* Frozen and unused: as in serial PyTorch, a parameter that does not require grad
  (frozen) gets no gradient (and takes no hook); one that forward did not use gets
  none either (its hook never fires: wait for nothing that depends on it).
* Accumulation: two backward passes without zero_grad leave the SUM of both
  passes' means: average the .grad autograd accumulated, in place.
* Communication: forward communicates nothing; a backward (a training step)
  all-reduces each gradient at most once, on `group`: register the hooks once, in
  the constructor, never per forward. Fewer messages (a flat buffer) are fine. A
  work started with async_op=True is waited (work.wait()) before its tensor is
  used: before the constructor returns, before backward returns. Every rank makes
  the same calls, whatever its data (a rank whose gradient is zero all-reduces it).
* Group: use `group` for every collective, rank and size; its ranks need not be
  consecutive ({0, 2}): the broadcast's src is dist.get_global_rank(group, 0).
* Build it yourself: from torch.distributed collectives and autograd hooks.
  torch's DistributedDataParallel is what this exercise rebuilds (its C++ reducer
  communicates out of the checker's sight), so it is refused.
"""
import torch
import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module, group=None) -> None:
    """Replace each parameter's .grad by its mean over the ranks of `group`, in place.

    Call it after loss.backward() and before optimizer.step(). Parameters whose
    .grad is None (unused in this step) are skipped, on every rank alike.

    Shapes: each p.grad keeps the shape of p; afterwards it is identical on
    every rank of `group`.

    Steps: for each parameter with a gradient, dist.all_reduce(p.grad, group=group)
    (sum), then divide by dist.get_world_size(group).
    """
    raise NotImplementedError("[E1.1] average_gradients: all-reduce each p.grad over `group`, "
                              "then divide by the group's world size")


class DataParallel(nn.Module):
    """Wrap `module` so that N ranks train it like one process on the concatenated batch.

    Construction: copy rank 0's parameters and buffers to every rank, in
    place (dist.broadcast of each tensor from the global rank of group rank 0),
    so that all ranks start identical even if they were initialised differently.

    forward(*args, **kwargs): the wrapped module's forward, on this rank's own
    batch, with no communication.

    Backward: after loss.backward() returns, every parameter's .grad must hold
    the mean over ranks (as average_gradients does) without the user calling
    anything. Register, for each parameter that requires grad,
    p.register_post_accumulate_grad_hook(hook): autograd calls hook(p) once
    p.grad is fully accumulated for this backward; the hook all-reduces p.grad
    over `group` and divides by the world size. Hooks fire in the same order
    on every rank, so the collectives match up.

    `self.module` must be the wrapped module (checks read its parameters).
    """

    def __init__(self, module: nn.Module, group=None):
        super().__init__()
        self.module = module
        self.group = group
        raise NotImplementedError("[E1.2] DataParallel.__init__: broadcast rank 0's parameters and "
                                  "buffers, then register a post-accumulate-grad hook on each "
                                  "parameter")

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)
