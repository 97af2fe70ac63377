"""Exercise E9: pipeline parallelism: stages, GPipe and 1F1B.

Notebook: notebooks/11_pipeline.ipynb. Check: `rtp-course check pipeline`.
Tasks (each TODO below says its task; the notebook section of that number teaches it):

    E9.1  section 1: `stage_layers`, `PipelineStage`
    E9.2  section 2: `gpipe`
    E9.3  section 3: `one_f_one_b`
    E9.4  section 4: `data_parallel_pipeline`

A model too deep for one device is CUT BY DEPTH: the N ranks of `group` each hold a STAGE, a
run of consecutive layers, and a batch flows through them like cars on an assembly line.

    model = nn.Sequential(L blocks)          stage r of N holds model[r*L//N : (r+1)*L//N]
    N = 3, L = 7:   rank 0: blocks 0, 1      rank 1: blocks 2, 3      rank 2: blocks 4, 5, 6

Every block maps [b, D] to [b, D], so what travels between stages always has the shape and
dtype of one micro-batch of the input: a receiver allocates torch.empty_like(micro-batch).

FORWARD sends ACTIVATIONS down the line, BACKWARD sends their GRADIENTS back up:

    stage r:  x = receive from r-1 (stage 0: the data)      out = stage(x)     send out to r+1
              dout = receive from r+1 (last: from the loss)  out.backward(dout) send x.grad to r-1

One batch at a time keeps N-1 of the N ranks idle. MICRO-BATCHES fill the pipe: cut the batch
of B rows into M micro-batches of b = B / M rows (micro-batch i = rows i*b .. (i+1)*b - 1, as
inputs.chunk(M) cuts them), so stage r works on micro-batch i while stage r+1 works on i-1.
The last stage computes each micro-batch's loss, loss_fn(out_i, target_i) / M: the sum of the
M scaled losses is the whole batch's mean loss, and the gradients the M backward passes leave
(ACCUMULATED in .grad, as autograd does) are exactly serial training's on the whole batch.

GPIPE (all-forward-all-backward, E9.2): every stage runs the M forwards, then the M backwards.
It holds M micro-batches' activations at the end of its forwards. Idle time, the BUBBLE, is
(N-1)/(M+N-1) of the step: more micro-batches, smaller bubble, more memory.

1F1B (one-forward-one-backward, E9.3): the same bubble, less memory. Stage r of N with M
micro-batches runs w = min(N - r - 1, M) WARM-UP forwards, then alternates one forward and one
backward (the STEADY state: M - w of each), then the w remaining backwards (COOL-DOWN):

    N = 4, M = 6   stage 0:  F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5       (w = 3)
                   stage 3:  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5       (w = 0)

A stage never holds more than min(N - r, M) micro-batches' activations (GPipe: M).

DP x PP (E9.4): D pipelines side by side, each of P stages, P * D ranks. Pipeline d is ranks
d*P .. d*P + P - 1 (its `stage.group`); the D ranks holding the same stage s, ranks s, s + P, ...,
form that stage's data-parallel group (`dp_group`). Replica d trains on its own D-th of the
batch, inputs.chunk(D)[d] (d = its rank in dp_group), with 1F1B; then each stage's gradients
are averaged over its dp_group once per step, as E1's average_gradients does.

    P = 2, D = 2:   pipeline 0: ranks 0 -> 1      pipeline 1: ranks 2 -> 3
                    dp groups:  stage 0: {0, 2}   stage 1: {1, 3}

POINT-TO-POINT UNDER NCCL. On a GPU, a rank's operations on a group run one after the other
on the group's stream, and a send does not finish until its receive runs on the peer. A
blocking send to r+1 while r+1 sends to r waits forever. In 1F1B's steady state stage r sends
an activation to r+1 while r+1 sends a gradient to r. REQUIRED (what NCCL needs): two
neighbours never both wait in a send to each other (nor both in a receive): of each such
pair, at least one side posts its receive together with its send (one dist.batch_isend_irecv)
or before it. RECOMMENDED: on every stage, post each pair in ONE dist.batch_isend_irecv (send
forward + receive backward; send backward + receive forward). Wait on every work an isend,
irecv or batch_isend_irecv returns before you use or reuse its tensor. A single send or
receive alone is fine where its peer is posting the matching operation (GPipe's chain is).

Rules your code must follow (the checker tests each one).
Course-wide rules (rtp_course/course/rules.py, notebook 01): 'Device', 'Dtypes'.
* Results: on the last stage gpipe and one_f_one_b return the batch's loss (the sum of the M
  losses scaled by 1/M: serial loss_fn on the whole batch), detached (requires_grad False),
  None on the other stages; after them every stage's parameters hold serial training's
  gradients on the whole batch, ADDED to what .grad held (the caller zeroes them), and
  optimizer steps give serial's weights; a stage's forward is its layers' forward. At every
  group size, one rank included.
* Communication: per micro-batch, each stage but the first receives its activation from the
  previous stage and sends the gradient of it back; each stage but the last sends its output
  to the next stage and receives the gradient of it: M sends and M receives each way, to and
  from the neighbouring stages only; stage_layers and PipelineStage do not communicate;
  data_parallel_pipeline adds, per step, one all-reduce of each of its stage's gradients (or
  fewer, flattened) on dp_group, and nothing else.
* Point-to-point only: activations and gradients travel by send/recv, isend/irecv or
  dist.batch_isend_irecv of dist.P2POp, never a collective (data_parallel_pipeline's gradient
  average is the one collective).
* Layout: stage r holds the model's own modules model[start:stop], (start, stop) =
  stage_layers(len(model), group), no copies of them: the caller's optimizer and the checker
  see its parameters.
* Schedule: micro-batch i is rows i*b .. (i+1)*b - 1. gpipe runs all M forwards of a stage
  before its first backward. one_f_one_b runs, on stage r, forwards and backwards in the order
  F^w (F B)^(M-w) B^w with w = min(N - r - 1, M), forwards and backwards each in micro-batch
  order 0 .. M-1; data_parallel_pipeline runs one_f_one_b (not gpipe) on stage.group, so
  its stages follow that order with r and N counted in their pipeline. gpipe's backwards may
  run in any order. (A forward is the stage's forward on one micro-batch, a backward the
  backward from its output; how you post the transfers between them is yours.)
* Memory: one_f_one_b's stage r (and data_parallel_pipeline's) keeps at most min(N - r, M)
  micro-batches' activations (what autograd saved for their backward) alive at once. A
  backward without retain_graph frees what it used; retain_graph=True keeps it alive.
* Wait on every work: wait() on every work that isend, irecv or dist.batch_isend_irecv
  returns (the send's too; under NCCL's rules batch_isend_irecv returns one for the batch)
  before the schedule goes on with its tensor or returns.
* Group: r and N are this rank's place in the pipeline's group and its size: `group` in
  stage_layers, PipelineStage, gpipe and one_f_one_b (dist.get_rank(group),
  dist.get_world_size(group); the schedules are given group=stage.group), stage.group in
  data_parallel_pipeline (its own argument is dp_group). Every p2p call (send, recv, isend,
  irecv, dist.P2POp) takes group=stage.group and the peer's GLOBAL rank: translate the
  neighbours with dist.get_global_rank(group, r - 1) and (group, r + 1) when a group is given.
  Its ranks need not be consecutive (the 'subgroup' check runs on ranks {0, 2, 3}).
  data_parallel_pipeline averages on dp_group, never on the world or on the pipeline's group.
"""
import torch
import torch.distributed as dist
from torch import nn


def stage_layers(num_layers, group=None):
    """(start, stop): stage r of N holds layers start .. stop-1 of a model of `num_layers`.

    start = r * num_layers // N and stop = (r + 1) * num_layers // N, r and N this rank's place
    in `group` and its size: consecutive runs, together every layer once (N = 4, L = 6: (0, 1),
    (1, 3), (3, 4), (4, 6)). The course's models have at least N blocks. Communication: none.
    """
    raise NotImplementedError("[E9.1] stage_layers: r, N = dist.get_rank(group), "
                              "dist.get_world_size(group); return (r * num_layers // N, "
                              "(r + 1) * num_layers // N)")


class PipelineStage(nn.Module):
    """This rank's stage of `model` (an nn.Sequential of blocks mapping [b, D] to [b, D]).

    Holds self.layers = model[start:stop] (the model's own modules: slicing an nn.Sequential
    keeps them), self.group, self.is_first, self.is_last, and the GLOBAL ranks of its
    neighbours self.prev and self.next (None on the first / last stage). forward(x) runs
    self.layers on one micro-batch: [b, D] -> [b, D]. Communication: none (the schedules send).
    """

    def __init__(self, model, group=None):
        super().__init__()
        raise NotImplementedError("[E9.1] PipelineStage: (start, stop) = stage_layers(len(model), "
                                  "group); self.layers = model[start:stop]; is_first / is_last "
                                  "from the group rank; prev / next with dist.get_global_rank")

    def forward(self, x):
        raise NotImplementedError("[E9.1] PipelineStage.forward: return self.layers(x)")


def gpipe(stage, inputs, targets, loss_fn, num_microbatches, group=None):
    """GPipe: the M forwards of this stage, then its M backwards; the batch's loss or None.

    inputs, targets: [B, D], the whole batch, given to every rank (the first stage reads
    inputs, the last reads targets); M = num_microbatches divides B. For each micro-batch i:
      forward: x_i = inputs.chunk(M)[i] on the first stage, else received from stage.prev into
               torch.empty_like(that chunk), then x_i.requires_grad_(); out_i = stage(x_i);
               send out_i.detach() to stage.next, or, on the last stage,
               loss_i = loss_fn(out_i, targets.chunk(M)[i]) / M; keep (x_i, out_i or loss_i).
      backward (after all forwards): on the last stage loss_i.backward(); elsewhere receive
               dout_i from stage.next and out_i.backward(dout_i); then send x_i.grad to
               stage.prev (not on the first stage).
    Returns the sum of the loss_i (a 0-dim tensor, detached) on the last stage, else None.
    Gradients are added to .grad (do not zero them). Communication: see the Rules.
    """
    raise NotImplementedError("[E9.2] gpipe: forwards of the M micro-batches (receive from prev, "
                              "stage(x), send to next / loss / M), then their backwards "
                              "(receive grad from next, backward, send x.grad to prev)")


def one_f_one_b(stage, inputs, targets, loss_fn, num_microbatches, group=None):
    """1F1B: warm-up, steady state, cool-down; the same loss and gradients as gpipe.

    w = min(N - r - 1, M) warm-up forwards (each: receive, forward, send, as in gpipe); then
    M - w times: one forward, then the backward of the OLDEST micro-batch kept; then the w
    backwards left. Free a micro-batch's activations by its backward: at most min(N - r, M)
    kept at once. In the steady state post together (one dist.batch_isend_irecv; recommended,
    POINT-TO-POINT UNDER NCCL above says what is required): the send of the forward's output
    with the receive of the gradient you need next, and the send of the backward's x.grad with
    the receive of the next micro-batch's activation.
    """
    raise NotImplementedError("[E9.3] one_f_one_b: w = min(N - r - 1, M); w forwards; then "
                              "forward + backward of the oldest, M - w times, batching the "
                              "send/receive pairs; then w backwards")


def data_parallel_pipeline(stage, inputs, targets, loss_fn, num_microbatches, dp_group=None):
    """DP x PP: one_f_one_b on this replica's shard of the batch, then the gradients averaged.

    inputs, targets: [B, D] the whole batch on every rank; replica d = dist.get_rank(dp_group)
    of D = dist.get_world_size(dp_group) trains on inputs.chunk(D)[d], targets.chunk(D)[d]
    (M = num_microbatches micro-batches of it), on its pipeline, stage.group. Then every
    parameter's .grad of the stage is replaced by its mean over dp_group. Returns what
    one_f_one_b returns: this replica's loss (its shard's mean) on its last stage, else None.
    After it, .grad holds serial training's gradient on the WHOLE batch, on every rank.
    """
    raise NotImplementedError("[E9.4] data_parallel_pipeline: d, D from dp_group; one_f_one_b on "
                              "inputs.chunk(D)[d], targets.chunk(D)[d] with stage.group; then "
                              "all_reduce each .grad on dp_group and divide by D")
