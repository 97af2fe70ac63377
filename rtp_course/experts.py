"""Exercise E10: mixture of experts: expert parallelism over all-to-all.

Notebook: notebooks/12_experts.ipynb. Check: `rtp-course check experts`.
Tasks (each TODO below says its task; the notebook section of that number teaches it):

    E10.1  section 2: `AllToAll`, `all_to_all`
    E10.2  section 3: `exchange_splits`, `ExpertParallelMoE`
    E10.3  section 4: `sync_gradients`, `train_step`

The serial layer is GIVEN: rtp_course/models/moe.py (`MoE`, `route`, `capacity`,
`load_balancing_loss`; notebook section 1). For T tokens x [T, d] and E experts:

    probs = softmax(router(x))                 [T, E]
    gate, expert = probs.topk(k)               [T, k]   (k = 1 or 2; gates not renormalised)
    capacity C = ceil(capacity_factor * T * k / E); each expert's queue takes the first
    choices in token order, then the second choices; a choice past slot C is DROPPED
    y[t] = sum over t's kept choices j of gate[t, j] * expert_{expert[t, j]}(x[t])
    aux = E * sum_e f_e * P_e                  (the load-balancing loss)

Expert parallelism: the N ranks of `group` each hold E/N experts, rank r (the rank WITHIN
group) experts [r*E/N, (r+1)*E/N), and a copy of the router; each rank has its OWN tokens.
A forward on rank r:

    1. route its T tokens as the serial layer does (capacity from ITS T: each rank's tokens
       are one routing group), keep the kept choices, sort them by expert (so by rank);
    2. counts[q, i] = rows for rank q's i-th expert; exchange_splits -> received[q, i]
       = rows rank q sends for MY i-th expert (one all-to-all of the counts);
    3. dispatch: all_to_all(x rows, input_splits=counts.sum(1), output_splits=received.sum(1));
       what arrives is rank 0's rows (its rows for my expert 0, then my expert 1, ...), then
       rank 1's, ...;
    4. run each local expert on its rows (every expert, on an empty batch if need be);
    5. combine: all_to_all back with the splits swapped; y[t] += gate * row (index_add).

Backward needs no code of yours beyond AllToAll.backward: autograd runs the reverse
all-to-alls. After it the router's gradient is this rank's own and expert e's gradient sums
every rank's tokens routed to e. Training is on the MEAN of the W ranks' losses (W = every
rank holding the layer: N, times the D data-parallel replicas of E10.3), so sync_gradients
averages the router over all W ranks and divides the experts' sums by W after summing them
over their D replicas only (EP x DP layout: rank = dp_rank * N + ep_rank).

Rules your code must follow (the checker tests each one).
Course-wide rules (rtp_course/course/rules.py, notebook 01): 'Device', 'Contiguity', 'Dtypes'.
NCCL's all-to-all (the checker applies its rules on CPU too): the input and output tensors are
contiguous and on the data's device (an int64 counts tensor too: counts.new_empty, never
torch.empty without device=), the output is allocated by the caller with sum(output_splits)
rows, and the split sizes are Python ints that agree across ranks (rank q's output_splits[p]
is rank p's input_splits[q]); a rank may send or receive zero rows, and still makes the call.
* Results: what each docstring states, for every group size (one rank included), compared
  with the serial layer on each rank's tokens: outputs, aux losses, input gradients, the
  router's and every expert's gradients, weights after SGD and Adam steps; capacity and
  dropping exactly as the serial layer defines them; an expert that gets no token has a zero
  gradient (not None). A later call leaves an earlier output as it was.
* New tensors: never modify the caller's tensors (x, grad_output, counts); return new ones.
* Layout: rank r of `group` holds experts [r*E/N, (r+1)*E/N) as `model.experts` (an
  nn.ModuleList, in order) and the router as `model.router`; r is dist.get_rank(group).
* Communication: all_to_all: one all-to-all per call forward and one backward;
  exchange_splits: one all-to-all; ExpertParallelMoE: none to build, at most 3 all-to-alls
  in forward (splits, dispatch, combine) and 2 in backward, nothing else; sync_gradients: per
  router parameter one all-reduce on model.group (and one on dp_group), per expert parameter
  one on dp_group (none without it); fewer with a flat buffer is fine.
* Group: pass `group=` to every collective; its ranks need not be consecutive.
* Raises: ExpertParallelMoE raises ValueError naming both numbers when N does not divide E,
  before anything else.
"""
import torch
import torch.distributed as dist
from torch import nn

import rtp_course.models.moe as serial


class AllToAll(torch.autograd.Function):
    """Rows of x go to the ranks of `group`; the rows sent to this rank come back.

    forward(ctx, x [S, *], input_splits, output_splits, group) -> [R, *]
        input_splits[q]: how many of x's rows (in order: the first input_splits[0] to rank 0,
        the next input_splits[1] to rank 1, ...) go to rank q; sum = S.
        output_splits[q]: how many rows arrive from rank q; the output holds them in rank
        order; R = sum(output_splits).
    backward(ctx, grad [R, *]) -> (grad of x [S, *], None, None, None)
        the REVERSE all-to-all: the gradient of each received row goes back to the rank it
        came from, so input and output splits swap.
    Communication: forward one all_to_all_single (torch's name); backward one.
    """

    @staticmethod
    def forward(ctx, x, input_splits, output_splits, group=None):
        raise NotImplementedError("[E10.1] AllToAll.forward: keep the splits (lists of ints) and "
                                  "group on ctx; out = x.new_empty((sum(output_splits), *x.shape[1:])); "
                                  "dist.all_to_all_single(out, x.contiguous(), output_splits, "
                                  "input_splits, group=group)")

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError("[E10.1] AllToAll.backward: the same call with the splits "
                                  "swapped, on grad_output.contiguous(); return it and 3 Nones")


def all_to_all(x, input_splits, output_splits, group=None):
    """AllToAll.apply(x, input_splits, output_splits, group)."""
    return AllToAll.apply(x, input_splits, output_splits, group)


def exchange_splits(counts, group=None):
    """Tell every rank how many rows it will receive from this one.

    counts [N, m] (int64, on the data's device): counts[q, i] = rows this rank sends for rank
    q's i-th item (its i-th local expert). Returns received [N, m], a new tensor:
    received[q, i] = rank q's counts[r, i], r this rank. Row q goes to rank q.
    Communication: one all-to-all (equal splits: one row of counts per rank).
    """
    raise NotImplementedError("[E10.2] exchange_splits: received = torch.empty_like(counts); "
                              "dist.all_to_all_single(received, counts.contiguous(), group=group)")


class ExpertParallelMoE(nn.Module):
    """The serial layer `moe` (rtp_course.models.moe.MoE) with its experts sharded over `group`.

    __init__(moe, group=None): N = group's size must divide moe.num_experts (ValueError
    otherwise); keep a copy of moe.router as self.router and copies of this rank's experts
    [r*E/N, (r+1)*E/N) as self.experts (nn.ModuleList); keep top_k, capacity_factor and
    num_experts. Communication: none.
    forward(x [T, d] or [..., d]) -> (y like x, aux loss []) as the serial layer on these
    tokens (steps 1-5 of the module docstring; use serial.route, serial.capacity and
    serial.load_balancing_loss, so capacity and dropping are the serial layer's).
    Communication: at most 3 all-to-alls in forward (exchange_splits, the dispatch and the
    combine, through your all_to_all), so 2 in backward; every rank makes them, also one with
    no row to send or receive.
    """

    def __init__(self, moe, group=None):
        super().__init__()
        raise NotImplementedError("[E10.2] ExpertParallelMoE.__init__: check N divides E; "
                                  "copy.deepcopy the router and experts [r*E/N, (r+1)*E/N)")

    def forward(self, x):
        raise NotImplementedError("[E10.2] ExpertParallelMoE.forward: route, sort kept choices by "
                                  "expert, exchange_splits, all_to_all, experts, all_to_all back, "
                                  "index_add gate * rows")


def sync_gradients(model, dp_group=None):
    """After backward, make model's gradients those of the mean of every rank's loss.

    W = N * D ranks hold the layer (N = model.group's size; D = dp_group's size, 1 when
    dp_group is None: no data parallelism). Router (replicated on all W ranks): all-reduce
    (sum) over model.group, then over dp_group, divide by W. Each local expert: its gradient
    already sums its EP group's tokens; all-reduce it over dp_group (its replicas: the ranks
    holding the SAME experts) and divide by W. Never over model.group for an expert: its
    ranks hold other experts. Skip a .grad that is None.
    Communication: per router parameter one all_reduce on model.group (and one on dp_group);
    per expert parameter one on dp_group, none without it (fewer with a flat buffer).
    """
    raise NotImplementedError("[E10.3] sync_gradients: router: all-reduce over model.group (and "
                              "dp_group), / W; experts: all-reduce over dp_group only, / W")


def train_step(model, optimizer, loss_fn, inputs, targets, dp_group=None, aux_weight=0.01):
    """One step on this rank's tokens; returns this rank's loss (detached).

    optimizer.zero_grad(); y, aux = model(inputs); loss = loss_fn(y, targets) +
    aux_weight * aux; loss.backward(); sync_gradients(model, dp_group); optimizer.step().
    """
    raise NotImplementedError("[E10.3] train_step: zero_grad, forward, loss + aux_weight * aux, "
                              "backward, sync_gradients, step")
