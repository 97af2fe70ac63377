"""Exercise E6: 2D parallelism, tensor parallel inside a group, data parallel across groups.

Notebook: notebooks/08_2d_parallelism.ipynb. Check: `rtp-course check groups`.
Tasks (each TODO below says its task; the notebook section of that number teaches it):

    E6.1  section 1: `build_groups`
    E6.2  section 2: `parallelize_2d`
    E6.3  section 3: `sync_gradients`, `train_step_2d`

W ranks (the whole job), tensor-parallel size T, D = W / T data-parallel replicas.
Each replica is a TP group of T ranks that together hold one copy of the model (E3);
the D replicas each train on their own batch and average gradients (E1).
The rank layout:

    rank = dp_rank * T + tp_rank
    TP group d: ranks [d*T, d*T + T)           consecutive: one node, fast links for the
                                               all-reduces of every layer
    DP group t: ranks [t, t + T, t + 2T, ...]  the ranks holding the same shard t

    W=4, T=2:  TP groups {0,1} {2,3};  DP groups {0,2} {1,3}
    W=8, T=4:  TP groups {0,1,2,3} {4,5,6,7};  DP groups {0,4} {1,5} {2,6} {3,7}

The ranks of one TP group feed the SAME batch (the replica's); the D replicas feed
different batches of equal size. The result must equal serial training on the
concatenation of the D batches (replica 0's first).

Rules your code must follow (the checker tests each one).
Course-wide rules (rtp_course/course/rules.py, notebook 01): 'Device', 'Dtypes'.
* Layout: the one above; every process makes the same dist.new_group calls in the
  same order (a call with use_local_synchronization=True is made by its members
  only, and is left out of that comparison), and each group connects exactly its
  members.
* Results: after parallelize_2d, sync_gradients and every step, rank (tp_rank t,
  dp_rank d) holds shard t of the serial model trained on the D batches.
* Frozen and unused: a parameter that does not require grad (a frozen embedding)
  stays frozen and gets no gradient: sync_gradients skips a .grad that is None.
* Raises: build_groups raises ValueError when tp_size does not divide the world
  size, before creating any group.
* Group: every collective runs on the group it belongs to: sync_gradients on
  groups.dp_group, the layers' on groups.tp_group (a helper you call with a group,
  such as your E1 average_gradients, must use it).
* Communication: sync_gradients makes at most one collective per parameter, on
  groups.dp_group (fewer, with a flat buffer, is fine). Replicated parameters are
  equal inside a TP group already: averaging them over tp_group too gives the same
  numbers and wastes a message per parameter. Over a whole step the same holds:
  forward and backward make only the TP layers' collectives (no data-parallel hooks
  left registered, e.g. by wrapping in your E1 DataParallel, which would all-reduce
  every gradient a second time), and the gradients are averaged once, in
  sync_gradients.
"""
from dataclasses import dataclass

import torch
import torch.distributed as dist

from . import data_parallel, tensor_parallel


@dataclass
class ParallelGroups:
    """This rank's two groups and its coordinates (given).

    tp_group: the TP group of this rank; dp_group: its DP group; tp_size = T;
    dp_size = D; tp_rank = rank % T; dp_rank = rank // T.
    Unpacks as a pair: `tp_group, dp_group = build_groups(2)`.
    """
    tp_group: dist.ProcessGroup
    dp_group: dist.ProcessGroup
    tp_size: int
    dp_size: int
    tp_rank: int
    dp_rank: int

    def __iter__(self):
        return iter((self.tp_group, self.dp_group))


def build_groups(tp_size):
    """Lay out the whole job (W = dist.get_world_size()): create all D TP groups and all T
    DP groups; return this rank's as a ParallelGroups.

    dist.new_group(ranks) is collective over the WHOLE job: every process must call it
    for EVERY group, members or not, in the same order (all TP groups d = 0..D-1, then
    all DP groups t = 0..T-1), and keep the ones it belongs to. A different order on some
    ranks mismatches the groups (a hang). (That is also why there is no base-group
    argument: a process outside a group cannot see its ranks, so it could not make the
    same calls. Megatron's initialize_model_parallel and torch's init_device_mesh also
    lay out the whole job.) torch also has dist.new_group(ranks,
    use_local_synchronization=True), which only the members call: the checker accepts it,
    but write the job-wide form first, the one every other library call here follows.
    ValueError when T does not divide W ("build_groups: the world size 4 is not divisible
    by tp_size=3; ..."), raised before creating any group.
    Communication: only group creation.
    """
    raise NotImplementedError("[E6.1] build_groups: loop d over replicas -> new_group of consecutive ranks; "
                              "loop t over shards -> new_group of ranks t, t+T, ...; keep yours")


def parallelize_2d(model, groups):
    """Make `model` (a course BertClassifier or TransformerLM) 2D-parallel, in place; return it.

    1. tensor_parallel.parallelize_transformer(model, groups.tp_group): TP inside the replica.
    2. Make the D replicas start equal: broadcast every parameter and buffer over
       groups.dp_group from its first rank (src is a GLOBAL rank:
       dist.get_global_rank(groups.dp_group, 0)). Shard t on every replica is the same tensor.
    Communication: TP layers' collectives on tp_group in forward/backward; the broadcasts here.
    """
    raise NotImplementedError("[E6.2] parallelize_2d: parallelize_transformer on tp_group, then broadcast "
                              "from dp rank 0")


def sync_gradients(model, groups):
    """After backward: average EVERY parameter's gradient over groups.dp_group.

    Replica d's loss L_d is the mean over its B samples, and the serial loss on the D*B
    concatenated samples is L = (1/D) sum_d L_d, so dL/dw = mean over replicas of dL_d/dw:
    one all-reduce (sum) per gradient on dp_group, then divide by D. Shards and replicated
    parameters (LayerNorms, heads) alike: replicated ones are equal INSIDE a TP group but
    each replica saw another batch. Never on tp_group: that would mix different shards.
    Hint: your E1 data_parallel.average_gradients(model, group=...) does exactly this.
    """
    raise NotImplementedError("[E6.3] sync_gradients: average every .grad over groups.dp_group")


def train_step_2d(model, optimizer, loss_fn, inputs, targets, groups):
    """One training step on this replica's batch; returns the loss (detached).

    optimizer.zero_grad(); loss = loss_fn(model(inputs), targets); loss.backward();
    sync_gradients(model, groups); optimizer.step(). The optimizer holds this rank's
    shards and replicated parameters (model.parameters() after parallelize_2d).
    """
    raise NotImplementedError("[E6.3] train_step_2d: zero_grad, forward, loss, backward, sync_gradients, step")
