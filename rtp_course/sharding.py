"""Exercise E7: sharding by hand, ZeRO-1 (a sharded optimizer) and FSDP.

Notebook: notebooks/09_sharding.ipynb. Check: `rtp-course check sharding`.
Tasks (each TODO below says its task; the notebook section of that number teaches it):

    E7.1  section 2: `ShardedOptimizer` (ZeRO-1)
    E7.2  section 3: `FullyShardedDataParallel` (FSDP)

Both keep DDP's program (notebook 02): every rank feeds its OWN batch, and training gives
what serial training on the concatenated batch gives (the gradient is the MEAN over ranks).
What they change is who stores what. Per parameter, DDP keeps on every rank

    the parameter (P elements), its gradient (P), the optimizer state (Adam: 2P)

ZeRO-1 keeps the parameters and gradients whole but shards the optimizer state: rank r
owns 1/N of every parameter and keeps the state of that piece only. FSDP (ZeRO-3) shards
all three: a rank stores 1/N of every layer, gathers a whole layer just before it runs and
frees it just after.

SHARDS. One rule cuts a flat vector of P elements in N shards (N = the group's size):

    S = ceil(P / N)                  # shard_size: -(-P // N)
    pad the vector with zeros at its END to N * S elements
    shard r = elements [r * S, (r + 1) * S) of the padded vector    (r = the GROUP rank)

e.g. P = 10, N = 4: S = 3, padded to 12; shard 3 holds element 9 and two zeros. Every
shard has the same size S, which all_gather_into_tensor and reduce_scatter_tensor need,
and every rank can compute every shard's size.

  * ZeRO-1 cuts each PARAMETER p (flattened: p.reshape(-1)) this way. Rank r's shard is the
    concatenation, in the order of the parameters, of shard r of each.
  * FSDP cuts each UNIT's flat vector this way: a unit is a layer, a child of the wrapped
    module that holds parameters (an nn.ModuleList or nn.Sequential child counts by its own
    children, recursively: the transformer's `layers.0`, `layers.1`, ...; a ModuleList is
    never called, so hooks on it would never fire); its flat vector is the
    concatenation of its parameters, flattened, in unit.named_parameters() order. Rank r
    keeps shard r of every unit, as one flat nn.Parameter per unit.

ZeRO-1, one step on rank r (after loss.backward(), every p.grad is rank r's own gradient):
    for each parameter: pad p.grad.reshape(-1) to N * S and REDUCE-SCATTER it (sum):
        rank r receives shard r of the sum over ranks; divide by N: the DDP gradient's shard
    step the inner optimizer on the shards only (its state: 1/N of a full one)
    for each parameter: ALL-GATHER the shards ([N * S]), keep the first numel elements,
        copy them into p: every rank holds the updated parameter
  Communication per step: reduce-scatters of the gradients (each rank sends ~ the gradient's
  bytes) and all-gathers of the shards; no all-reduce. (An all-reduce is a reduce-scatter
  followed by an all-gather: ZeRO-1 moves the same bytes as DDP, with the update between.)
  The reduce-scatters may also start DURING backward, as real ZeRO does to overlap them with
  it: a post-accumulate-grad hook on each parameter that requires grad
  (p.register_post_accumulate_grad_hook(hook), registered at construction) posts its
  reduce-scatter with async_op=True, and step() wait()s for every handle before the inner
  optimizer steps (one backward per step(): the hook fires once per backward). Let the hook
  hold the optimizer by weakref.ref(self): one holding it strongly makes a cycle through
  torch's hook table that the garbage collector cannot break (a dropped optimizer and its
  model would stay alive, which the Memory rule counts).

FSDP, a training step on rank r, unit by unit (the hooks do it, the user writes DDP's loop):
    forward  (forward pre-hook)   gather the unit: all_gather_into_tensor(full, shard), [N * S]
                                  post the NEXT unit's all-gather (async_op=True): a prefetch
                                  point the unit's parameters at pieces of `full` (views)
             (the layer computes; the next unit's gather travels meanwhile)
             (forward hook)       free `full`: its storage goes, the tensor object stays
    backward (full backward pre-hook, before the unit's own backward)
                                  gather the unit AGAIN (autograd saved views of `full`:
                                  put the values back in the same storage); prefetch the
                                  PREVIOUS unit (backward runs the units in reverse)
             (autograd computes full.grad, [N * S])
             (post-accumulate-grad hook on `full`)
                                  REDUCE-SCATTER full.grad, divide by N: the DDP gradient's
                                  shard r, added to the shard's .grad; free `full` and its grad
  Communication per step: per unit one all-gather in forward, one in backward, one
  reduce-scatter in backward. Memory: 1/N of the parameters, gradients and optimizer state,
  plus at most two gathered units at a time (the one computing and the one arriving).

  The tools, tried on a tensor `full` of N * S elements:
    full.untyped_storage().resize_(0)        frees its memory; autograd, which holds views of
                                             it, keeps the (now empty) tensor object
    full.untyped_storage().resize_(nbytes)   memory again (nbytes = N * S * element size)
    dist.all_gather_into_tensor(full.data, shard.detach(), group=group, async_op=True)
        .data: a write autograd does not see. Gathering into `full` itself is an in-place
        write into the tensor whose split views autograd made: the next forward pre-hook
        that gathers into it (step 2's) raises "Output 0 of Split is a view and is being
        modified inplace" (step 1 and its backward, whose hooks run without grad, do not)
    full[:P].split(sizes) (P = the unit's elements, without the padding; sizes = each
        parameter's numel): views whose gradients autograd sums into full.grad (in the
        forward pre-hook, each .view(shape) set on its submodule)
    AT CONSTRUCTION, once per unit, on the one `full` the unit keeps for its life:
        full.requires_grad_(True), THEN full.register_post_accumulate_grad_hook(hook):
        hook(full) once full.grad is complete, in every backward (torch refuses a hook on a
        tensor that does not require grad: requires_grad_ first, and not in a forward
        pre-hook, which runs after construction)
    del module._parameters["weight"]; module.weight = piece.view(shape)   # a plain tensor
    module.register_forward_pre_hook(fn(module, args)),
    module.register_forward_hook(fn(module, args, output)),
    module.register_full_backward_pre_hook(fn(module, grad_output))

Every function takes an optional process `group` (None: all ranks): dist.get_rank(group),
dist.get_world_size(group), and every collective on `group`. A broadcast's `src` is a
GLOBAL rank: dist.get_global_rank(group, 0) for group rank 0 (0 when group is None).

Rules your code must follow (the checker tests each one).
Course-wide rules (rtp_course/course/rules.py, notebook 01): 'Device', 'Dtypes'.
* Results: every rank starts from group rank 0's parameters (and buffers, which the
  checks' ranks draw differently); then, on every
  rank, the outputs, the input gradients, each shard's gradient (the shard of the
  DDP-averaged gradient) and the parameters after SGD and Adam steps are serial training's
  on the concatenated batch, at world sizes 1 to 4 (sizes N does not divide included).
* Accumulation (FullyShardedDataParallel): gradients accumulate as in serial PyTorch: two
  backward passes without zero_grad leave each shard's .grad the sum of both (add to it,
  never assign it), and two forwards before one backward (two micro-batches) give the
  gradient of both, each unit reduce-scattered once per backward.
* Layout: rank r's shard is shard r of the SHARDS rule above: for ShardedOptimizer, the
  parameters of `self.optimizer`, concatenated in order; for FullyShardedDataParallel, its
  parameters (`parameters()`: shards only), concatenated in order, one unit after another.
* Communication: each docstring's Communication, and nothing more; any API of the same
  operation will do (all_gather, all_gather_into_tensor or all_gather_single, which torch
  2.13 recommends over the deprecated all_gather_into_tensor; reduce_scatter,
  reduce_scatter_tensor or reduce_scatter_single), fewer calls are fine. No all-reduce of
  gradients: the checker counts all_reduce, reduce_scatter and all_gather calls per phase,
  and their bytes. Every rank makes the same collectives whatever its data: a gradient that
  is zero on one rank only (an unused ReLU branch, an embedding row no token of its batch
  used) is reduce-scattered all the same (the checks give one rank a zero loss at a step).
* Frozen and unused (ShardedOptimizer): a parameter that does not require grad stays so and
  gets no gradient: its .grad is None after backward, its shard gets none, it is never
  stepped (the check freezes one); a gradient hook can be registered only on a parameter
  that requires grad.
* Memory: ShardedOptimizer: the state of `self.optimizer` is that of the shards (about
  1/N of a full optimizer's), and across steps a rank keeps nothing else besides the model's
  parameters and gradients, the shards and their gradients (at most one flat buffer of the
  parameters' size besides). FullyShardedDataParallel: a rank keeps its shards, their
  gradients and optimizer state; after forward it holds at most two gathered units (besides
  what autograd saved as activations: a gathered unit's storage counts wherever it is held,
  autograd's saved views of it included); after the optimizer steps, no gathered unit and
  no full gradient. The checker counts every tensor storage alive in the rank.
* Overlap (FullyShardedDataParallel): post the next unit's all-gather with async_op=True
  BEFORE the current unit computes, and wait() for it when that unit starts: in forward,
  every unit's gather but the first has some compute (an operation on data) between its
  post and its wait; in backward at least one does.
* Group: use `group` for every collective, rank and size; its ranks need not be
  consecutive (the groups of global ranks {0, 2} and {1, 3}), and the initial weights come
  from its rank 0 (global rank 1 for {1, 3}).
"""
import torch
import torch.distributed as dist
from torch import nn


class ShardedOptimizer(torch.optim.Optimizer):
    """ZeRO-1: ShardedOptimizer(params, optimizer_cls, group=None, **optimizer_kwargs).

    Used where a torch optimizer is, WITHOUT DataParallel (step() averages the gradients):

        opt = ShardedOptimizer(model.parameters(), torch.optim.Adam, lr=1e-3)
        opt.zero_grad(); loss_fn(model(x_of_this_rank), y).backward(); opt.step()

    Construction:
      * super().__init__(params, optimizer_kwargs): the torch.optim.Optimizer base keeps
        the FULL parameters in self.param_groups (its zero_grad() clears their .grad);
      * broadcast every parameter from group rank 0 (the ranks start identical);
      * cut this rank's shard of every parameter (SHARDS in the module docstring): tensors
        of S elements each (a slice of the padded copy keeps that whole copy alive, N * S
        elements; .clone() keeps S: the Memory rule allows one flat buffer of the
        parameters' size besides, so either passes, the clone is the leaner);
      * self.optimizer = optimizer_cls(<the shards>, **optimizer_kwargs): its parameters,
        concatenated in order, are this rank's shard (the checker reads them and their
        .grad), and its state is the only optimizer state this rank keeps.

    step(closure=None): as in the module docstring (reduce-scatter, divide by N, step the
    shards, all-gather into the parameters); or wait for the reduce-scatters that gradient
    hooks started in backward (module docstring), then the rest. A parameter whose .grad is
    None (frozen: requires_grad=False, or unused in this step, on every rank alike) is left
    as it is: its shard gets no gradient (.grad None) and the inner optimizer skips it. (With
    one flat shard for all parameters, step such a part with gradient 0 only if you copy
    nothing back into the parameter: Adam's or momentum's state would still move it. The
    checks freeze one parameter.) A gradient that is zero on this rank is reduce-scattered
    all the same: the others' shards need it, and they wait for it.

    Communication: construction, one broadcast per parameter; a training step (backward and
    step()), per parameter at most one reduce-scatter (of its gradient: in step(), or posted
    by a gradient hook and waited in step()) and one all-gather (of its shard, in step()), on
    `group`: nothing else (no all-reduce). One flat buffer for all parameters is fine.
    """

    def __init__(self, params, optimizer_cls, group=None, **optimizer_kwargs):
        super().__init__(params, optimizer_kwargs)
        self.group = group
        raise NotImplementedError("[E7.1] ShardedOptimizer.__init__: broadcast the parameters "
                                  "from group rank 0, cut this rank's shard of each (padded to "
                                  "N * S), build self.optimizer = optimizer_cls(shards, "
                                  "**optimizer_kwargs)")

    @torch.no_grad()
    def step(self, closure=None):
        raise NotImplementedError("[E7.1] ShardedOptimizer.step: reduce-scatter each padded "
                                  "gradient into its shard's .grad (then / N), "
                                  "self.optimizer.step(), all-gather the shards back into the "
                                  "parameters")


class FullyShardedDataParallel(nn.Module):
    """FSDP by hand: FullyShardedDataParallel(module, group=None), a drop-in for DDP.

        fsdp = FullyShardedDataParallel(model)
        opt = torch.optim.Adam(fsdp.parameters())          # the shards only
        opt.zero_grad(); loss_fn(fsdp(x_of_this_rank), y).backward(); opt.step()

    Construction: broadcast `module`'s parameters and buffers from group rank 0; find the
    units (module docstring; `module` itself holds no parameter of its own, and forward
    runs every unit once, in the order the units were found); for each unit, keep shard r
    of its flat vector as an nn.Parameter registered on this wrapper (an nn.ParameterList
    in unit order will do) and remove the unit's own parameters
    (del submodule._parameters[name]), so that `self.parameters()` yields the shards only;
    make the unit's `full` (N * S elements, storage freed at once), full.requires_grad_(True)
    and register its post-accumulate-grad hook (here, after requires_grad_); register the
    unit's forward pre-hook, forward hook and full backward pre-hook. `self.module` is the
    wrapped module.

    forward(*args, **kwargs) (given): self.module(*args, **kwargs); the hooks do the rest
    (module docstring: FSDP, a training step). A forward under torch.no_grad() gathers and
    frees the same way (no backward follows).

    Communication: construction, a broadcast per parameter and buffer; forward, per unit
    one all-gather of its shard (waited before the unit computes); backward, per unit one
    all-gather and one reduce-scatter of its full gradient; an optimizer step, nothing;
    full_state_dict, one all-gather per unit.
    """

    def __init__(self, module, group=None):
        super().__init__()
        self.module = module
        self.group = group
        raise NotImplementedError("[E7.2] FullyShardedDataParallel.__init__: broadcast from group "
                                  "rank 0, keep shard r of each unit's flat vector as an "
                                  "nn.Parameter, remove the unit's parameters, register its "
                                  "forward pre-hook, forward hook and full backward pre-hook")

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)        # the hooks gather and free the units

    def full_state_dict(self):
        """The serial module's state_dict on every rank, for checkpoints: the same keys
        ('0.weight', 'layers.1.linear1.bias', ...: the unit's path, then the parameter's
        whole name inside the unit), full tensors (gathered: one all-gather per unit), the
        buffers as they are."""
        raise NotImplementedError("[E7.2] full_state_dict: all-gather each unit's shard, cut the "
                                  "flat vector back into its parameters (drop the padding)")
