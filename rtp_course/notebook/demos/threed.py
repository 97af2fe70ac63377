"""Notebook 11's capstone: DP x TP x PP on a 2 x 2 x 2 DeviceMesh of 8 ranks, built from the
student's own E1 (`data_parallel.average_gradients`), E3 (`tensor_parallel.ColumnParallelLinear`,
`RowParallelLinear`, which call E2's `comm`) and E9 (`pipeline.PipelineStage`, `one_f_one_b`).

    mesh dims ("dp", "pp", "tp"), rank = 4 * dp + 2 * pp + tp:
    tp groups {0,1} {2,3} {4,5} {6,7}: the two halves of each block's MLP (all-reduce per block)
    pp groups {0,2} {1,3} {4,6} {5,7}: a pipeline of two stages (activations and their gradients)
    dp groups {0,4} {1,5} {2,6} {3,7}: the same shard of the same stage (gradients, once a step)

TP innermost, as notebook 08 laid it out (the busiest links on one node), and pipelines of
consecutive stages as E9.4's; DP outermost. `train` runs in every rank; `serial` trains the same
model on the same global batch in the caller; `compare` judges the ranks against it, parameter
by parameter, in the caller; `capstone` does the three, as the notebook cell runs it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from rtp_course.course.impl import current
from rtp_course.course.todo import needs_exercises
from rtp_course.models.stages import cut
from rtp_course.notebook.demos import FAILED, run_demo
from rtp_course.runtime import commlog
from rtp_course.runtime.launcher import rank_device

SHAPE, DIMS = (2, 2, 2), ("dp", "pp", "tp")
WORLD = SHAPE[0] * SHAPE[1] * SHAPE[2]
LAYERS, WIDTH, HIDDEN = 4, 4, 8          # 4 blocks: Linear(4, 8), Tanh, Linear(8, 4), Tanh
ROWS, MICROBATCHES, STEPS, LR = 8, 2, 2, 0.1   # global batch of 8: 4 rows per replica, 2 + 2
DTYPE = torch.float64                    # the comparison is exact up to float64 rounding
TOLERANCE = 1e-10
NEEDS = "code of E1.1, E3.1, E3.2 (on E2's comm), E9.1 and E9.3"

# where each Linear of a block is split over tp: fc1 (index 0) by output rows, fc2 (index 2) by
# input columns; fc2's bias is replicated (None: every tp rank holds it whole)
SPLIT = {("0", "weight"): 0, ("0", "bias"): 0, ("2", "weight"): 1, ("2", "bias"): None}


def serial_model() -> nn.Sequential:
    """The same float64 blocks on every rank and in the caller."""
    g = torch.Generator().manual_seed(49)

    def linear(i, o):
        layer = nn.Linear(i, o, dtype=DTYPE)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(o, i, generator=g, dtype=DTYPE) / i ** 0.5)
            layer.bias.copy_(torch.randn(o, generator=g, dtype=DTYPE) * 0.1)
        return layer
    return nn.Sequential(*[nn.Sequential(linear(WIDTH, HIDDEN), nn.Tanh(), linear(HIDDEN, WIDTH),
                                         nn.Tanh()) for _ in range(LAYERS)])


def batches():
    """The global batch of every step: (inputs [STEPS, ROWS, WIDTH], targets likewise)."""
    g = torch.Generator().manual_seed(11)
    return (torch.randn(STEPS, ROWS, WIDTH, generator=g, dtype=DTYPE),
            torch.randn(STEPS, ROWS, WIDTH, generator=g, dtype=DTYPE))


def layout() -> dict:
    """{dim: [[global ranks of one group], ...]} of the mesh, as init_device_mesh lays it out."""
    ranks = torch.arange(WORLD).view(SHAPE)
    out = {}
    for i, dim in enumerate(DIMS):
        moved = ranks.movedim(i, -1).reshape(-1, SHAPE[i])
        out[dim] = sorted(moved.tolist())
    return out


def _tensor_parallel(model, tp_group):
    """Every block's fc1 column-parallel, fc2 row-parallel over tp_group (E3), in place."""
    tp = current("tensor_parallel")
    for block in model:
        block[0] = tp.ColumnParallelLinear.from_serial(block[0], gather_output=False,
                                                       group=tp_group)
        block[2] = tp.RowParallelLinear.from_serial(block[2], input_is_parallel=True,
                                                    group=tp_group)
    return model


def _talks(events) -> dict:
    """{(operation, group's ranks or peer, where): calls}: who this rank talked to, and from
    which line, from the communication log."""
    seen = {}
    for e in events:
        key = (e.family or e.kind, e.peer if e.peer is not None else tuple(e.members), e.where)
        seen[key] = seen.get(key, 0) + 1
    return seen


def _grads(params) -> dict:
    """{name: a copy of its .grad, None where it has none (a gradient that never came)}."""
    return {n: None if p.grad is None else p.grad.detach().cpu().clone() for n, p in params.items()}


@needs_exercises
def train(rank, world_size):
    """STEPS SGD steps of the 3D-parallel model. This rank's groups of the mesh, its replica's
    loss per step (last stage), its parameters' gradients per step before and after the DP
    average and its weights after the last step, by serial name, and who it talked to."""
    from torch.distributed.device_mesh import init_device_mesh
    pipe, dp = current("pipeline"), current("data_parallel")
    device = rank_device()
    mesh = init_device_mesh(device.type, SHAPE, mesh_dim_names=DIMS)
    groups = {d: mesh.get_group(d) for d in DIMS}
    commlog.install()
    commlog.reset("capstone")
    model = _tensor_parallel(serial_model().to(device), groups["tp"])
    stage = pipe.PipelineStage(model, group=groups["pp"])
    mine = {id(p) for p in stage.parameters()}
    params = {n: p for n, p in model.named_parameters() if id(p) in mine}
    optimizer = torch.optim.SGD(params.values(), lr=LR)
    inputs, targets = batches()
    rows = _replica_rows(mesh.get_local_rank("dp"))
    out = {"losses": [], "replica_grads": [], "grads": []}
    for step in range(STEPS):
        optimizer.zero_grad()
        x, y = inputs[step, rows].to(device), targets[step, rows].to(device)
        loss = pipe.one_f_one_b(stage, x, y, F.mse_loss, MICROBATCHES, group=groups["pp"])
        out["replica_grads"].append(_grads(params))
        dp.average_gradients(stage, group=groups["dp"])
        out["grads"].append(_grads(params))
        out["losses"].append(None if loss is None else loss.item())
        optimizer.step()
    out["weights"] = {n: p.detach().cpu().clone() for n, p in params.items()}
    out["groups"] = {d: dist.get_process_group_ranks(g) for d, g in groups.items()}
    out["talks"] = _talks(commlog.events())
    return out


def _replica_rows(d: int) -> slice:
    """Replica d's rows of the global batch: its D-th, as E9.4 cuts it."""
    return slice(d * ROWS // SHAPE[0], (d + 1) * ROWS // SHAPE[0])


def serial() -> dict:
    """The serial model on the same global batches: per step the loss and gradients of each
    replica's rows, the gradients of the whole batch (what it steps on), and the weights after
    the last step."""
    model = serial_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    inputs, targets = batches()
    out = {"replica_losses": [], "replica_grads": [], "grads": []}
    for step in range(STEPS):
        per_replica = [_loss_and_grads(model, inputs[step, _replica_rows(d)],
                                       targets[step, _replica_rows(d)]) for d in range(SHAPE[0])]
        out["replica_losses"].append([loss for loss, _ in per_replica])
        out["replica_grads"].append([grads for _, grads in per_replica])
        out["grads"].append(_loss_and_grads(model, inputs[step], targets[step])[1])
        optimizer.step()                 # on the whole batch's gradients, still in .grad
    out["weights"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    return out


def _loss_and_grads(model, x, y):
    model.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


# ---- in the caller: judge the ranks against serial training ---------------------------------


@dataclass
class Verdict:
    """What `compare` found: `ok`, one line per rank, the first difference and what to look at
    (`problem`), and the calls each mesh dimension carried (`traffic`)."""
    ok: bool
    lines: list = field(default_factory=list)
    problem: str = ""
    traffic: dict = field(default_factory=dict)

    def __str__(self):
        head = ("DP x TP x PP matches serial training: loss, gradients and weights, every rank"
                if self.ok else f"{FAILED} DP x TP x PP does not match serial training")
        body = "\n".join(["  " + line for line in self.lines])
        return f"{head}\n{body}" + (f"\n{self.problem}" if self.problem else "")


def _coords(rank: int) -> tuple:
    """(dp, pp, tp) of a global rank in the mesh."""
    return tuple(torch.arange(WORLD).view(SHAPE).eq(rank).nonzero()[0].tolist())


def _stage_names(pp: int) -> set:
    start, stop = cut(pp, SHAPE[1], LAYERS)
    return {f"{b}.{i}.{kind}" for b in range(start, stop) for i, kind in SPLIT}


def _shard(name: str, full: torch.Tensor, tp: int) -> torch.Tensor:
    """Rank tp's slice of a serial parameter (or of its gradient), as E3 cuts it."""
    _, i, kind = name.split(".")
    dim = SPLIT[(i, kind)]
    return full if dim is None else full.chunk(SHAPE[2], dim)[tp]


def _error(got, want) -> float:
    if got is None or want is None or got.shape != want.shape:
        return float("inf")
    return (got.double() - want).abs().max().item() / max(1.0, want.abs().max().item())


def _wrong(results, serial_part) -> list:
    """[(rank, name, error)] of the tensors beyond TOLERANCE; serial_part(rank) is the serial
    {name: tensor} that rank's holds a shard of."""
    found = []
    for rank, got in results:
        want = serial_part(rank)
        for name in sorted(got):
            err = _error(got[name], _shard(name, want[name], _coords(rank)[2]))
            if err > TOLERANCE:
                found.append((rank, name, err))
    return found


def _who(rank: int) -> str:
    d, p, t = _coords(rank)
    return f"rank {rank} (dp {d}, pp {p}, tp {t})"


def compare(results: list, expected: dict) -> Verdict:
    """The ranks' `train` results against `serial()`: the first difference, earliest step and
    phase first (a later one follows from it), located where the data allow."""
    flows = traffic(results)
    problem = _layout_problem(results) or _first_difference(results, expected, flows)
    lines = [_summary(rank, res, expected) for rank, res in enumerate(results)]
    return Verdict(not problem, lines, problem or "", flows)


def _layout_problem(results) -> str | None:
    """What a rank holds, before any value: its stage's blocks (E9.1), named as E3 names them,
    on the mesh's groups (which this judge assumes)."""
    for rank, res in enumerate(results):
        held, want = set(res["weights"]), _stage_names(_coords(rank)[1])
        if _blocks(held) != _blocks(want):
            holds = (f"the parameters of blocks {_blocks(held)}" if held else
                     "none of the model's own parameters (copies of them?)")
            return (f"PipelineStage (E9.1) on {_who(rank)} holds {holds}; rule 'Layout': stage "
                    f"{_coords(rank)[1]} of {SHAPE[1]} holds blocks {_blocks(want)} of the model, "
                    f"its own modules")
        if held != want:
            return (f"The TP layers on {_who(rank)} hold {sorted(held - want)} where E3's "
                    f"ColumnParallelLinear and RowParallelLinear hold `weight` and `bias`: "
                    f"{sorted(want - held)}")
        if res["groups"] != layout_of(rank):
            return (f"{_who(rank)} is in the mesh's groups {res['groups']}, not in those this "
                    f"capstone judges by, {layout_of(rank)}: a bug of the course, please report it")
    return None


def _blocks(names) -> list:
    return sorted({int(n.split(".")[0]) for n in names})


def _first_difference(results, expected, flows) -> str | None:
    def replica_part(step):
        return lambda rank: expected["replica_grads"][step][_coords(rank)[0]]
    for step in range(STEPS):
        bad = _loss_errors(results, expected, step)
        if bad:
            return _forward_problem(step, *bad[0], results, expected)
        bad = _wrong([(r, res["replica_grads"][step]) for r, res in enumerate(results)],
                     replica_part(step))
        if bad:
            return _backward_problem(step, bad)
        bad = _wrong([(r, res["grads"][step]) for r, res in enumerate(results)],
                     lambda rank: expected["grads"][step])
        if bad:
            return _average_problem(step, bad[0], flows)
    bad = _wrong([(r, res["weights"]) for r, res in enumerate(results)],
                 lambda rank: expected["weights"])
    return _step_problem(bad[0]) if bad else None


def _loss_errors(results, expected, step) -> list:
    """[(rank, error)] of the last stage's losses beyond TOLERANCE at `step`."""
    found = []
    for rank, res in enumerate(results):
        d, p, _ = _coords(rank)
        if p == SHAPE[1] - 1:
            got, want = res["losses"][step], expected["replica_losses"][step][d]
            err = float("inf") if got is None else abs(got - want) / max(1.0, abs(want))
            if err > TOLERANCE:
                found.append((rank, err))
    return found


def _forward_problem(step, rank, err, results, expected) -> str:
    d = _coords(rank)[0]
    got, want = results[rank]["losses"][step], expected["replica_losses"][step][d]
    return (f"The first difference, step {step + 1}, forward: {_who(rank)} says replica {d}'s "
            f"loss is {_number(got)}, serial training's on the same rows {want:.6f}. The forward "
            f"runs your TP layers inside each stage (E3: ColumnParallelLinear, then RowParallelLinear's "
            f"all-reduce of the partial sums over tp) and one_f_one_b's forwards (E9.3: each "
            f"activation sent to the next stage, each micro-batch's loss divided by M). "
            f"`rtp-course check tensor_parallel pipeline` names the function.")


def _backward_problem(step, bad) -> str:
    """Backward runs from the last block to the first: the LAST block with a wrong gradient is
    where the error entered, and what fed it its output's gradient is the suspect."""
    block = max(int(name.split(".")[0]) for _, name, _ in bad)
    rank, name, err = next(b for b in bad if int(b[1].split(".")[0]) == block)
    p = _coords(rank)[1]
    _, stop = cut(p, SHAPE[1], LAYERS)
    if block == LAYERS - 1:
        cause = ("It is the last block: the suspects are the loss's backward on the last stage "
                 "(one_f_one_b, E9.3: each micro-batch's loss / M) and this block's own TP layers' "
                 "backward (E3).")
    elif block + 1 == stop:
        cause = (f"The blocks after it are right: the suspects are the gradient of its output, "
                 f"which stage {p} receives from stage {p + 1} (one_f_one_b's receive, and the "
                 f"send of x.grad, E9.3), and block {block + 1}'s input gradient, which "
                 f"ColumnParallelLinear sums over the tp group in backward (comm.duplicate: E3, "
                 f"E2).")
    else:
        cause = (f"The blocks after it are right, and block {block + 1}, on the same stage, gave "
                 f"it its output's gradient: the suspect is ColumnParallelLinear's input "
                 f"gradient, of which each tp rank holds a part until it is summed over the tp "
                 f"group in backward (comm.duplicate: E3, E2).")
    return (f"The first difference, step {step + 1}, backward, before the DP average: "
            f"{_who(rank)}'s gradient of {name} (block {block}) differs from serial training's "
            f"on replica {_coords(rank)[0]}'s rows by {err:.1e} (relative). {cause} "
            f"`rtp-course check tensor_parallel pipeline` names the function.")


def _average_problem(step, first, flows) -> str:
    rank, name, err = first
    group = layout_of(rank)["dp"]
    outside = "".join(f"\n  it also ran {call} x {n}: outside this rank's groups of the mesh"
                      for call, n in flows.get("other", {}).items())
    return (f"The first difference, step {step + 1}, after average_gradients: every replica's "
            f"gradients were right before it, and {_who(rank)}'s gradient of {name} after it "
            f"differs from the whole batch's by {err:.1e} (relative). average_gradients(stage, "
            f"group=mesh['dp']) (E1.1) replaces each .grad by its mean over the group it is "
            f"given, here ranks {group}, and over no other.{outside}\n"
            f"`rtp-course check data_parallel` names the function.")


def _step_problem(first) -> str:
    rank, name, err = first
    return (f"The gradients were right, but after optimizer.step() {_who(rank)}'s {name} differs "
            f"from serial training's by {err:.1e} (relative): the optimizer steps the parameters "
            f"the stage holds, so PipelineStage must keep the model's own modules, no copies "
            f"(E9.1, rule 'Layout').")


def _summary(rank, res, expected) -> str:
    def worst(got, want):
        return max((_error(got[n], _shard(n, want[n], _coords(rank)[2])) if n in want
                    else float("inf") for n in got), default=0.0)
    d, p, _ = _coords(rank)
    grads = max(worst(res["grads"][s], expected["grads"][s]) for s in range(STEPS))
    line = (f"{_who(rank)}: blocks {list(range(*cut(p, SHAPE[1], LAYERS)))}, gradient error "
            f"{grads:.1e}, weight error {worst(res['weights'], expected['weights']):.1e}")
    if p == SHAPE[1] - 1:
        loss = max(float("inf") if res["losses"][s] is None else
                   abs(res["losses"][s] - expected["replica_losses"][s][d]) for s in range(STEPS))
        line += f", loss error {loss:.1e}"
    return line


def _number(x) -> str:
    return "none" if x is None else f"{x:.6f}"


def _target(target) -> str:
    return f"with rank {target}" if isinstance(target, int) else f"on ranks {list(target)}"


def layout_of(rank: int) -> dict:
    """{dim: the global ranks of `rank`'s group along dim}."""
    return {dim: next(g for g in groups if rank in g) for dim, groups in layout().items()}


def traffic(results) -> dict:
    """{dim: {operation: calls}} over the run, all ranks together, each call put in the mesh
    dimension whose group it ran on (a send or receive: the group its peer shares); calls on
    no group of the mesh under "other", {"operation on ranks [...] at file:line": calls}."""
    out = {}
    for rank, res in enumerate(results):
        mine = layout_of(rank)
        for (op, target, where), n in res["talks"].items():
            dim = next((d for d, g in mine.items()
                        if (target in g if isinstance(target, int) else sorted(target) == g)), None)
            key = op if dim else f"{op} {_target(target)} at {where}"
            per_dim = out.setdefault(dim or "other", {})
            per_dim[key] = per_dim.get(key, 0) + n
    return out


def capstone(timeout: float = 120.0):
    """Run `train` on 8 ranks, judge it against serial training, print the verdict; return it
    (None when the run could not happen: run_demo printed why)."""
    results = run_demo(train, WORLD, needs=NEEDS, timeout=timeout)
    if results is None:
        return None
    verdict = compare(results, serial())
    print(verdict)
    return verdict
