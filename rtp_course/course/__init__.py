"""The course in one table: its exercises, their tasks, notebooks, points and world sizes.

Every other place (CLI, checker, notebooks' hints, nbgrader configuration and
source builder, submission collector, release, tests) derives from `COURSE`.
Adding an exercise is one row here plus its files: the stub
`rtp_course/<module>.py`, its reference `solutions/<module>.py`, its public
checks `rtp_course/checker/public/<module>.py` and its notebook
(`scripts/new_exercise.py` writes the row and their skeletons).

A task is one numbered step of an exercise, "E2.1". The same id marks the TODO
in the stub, the notebook section that teaches it, and every check of it, so a
failing check says where to read. A task's `requires` are the tasks whose functions its
own call (ColumnParallelLinear calls comm's duplicate): a failing check is said to "may
follow from" an earlier failure only along them (checker/diagnosis.blame_earlier_tasks).
The course's rules, and the checks holding each in each exercise, are in `rules.py`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Task:
    id: str                 # "E2.1"
    names: tuple            # the functions and classes of the exercise module it covers
    section: int            # the numbered section of the notebook that teaches it
    requires: tuple = ()    # ids of the tasks whose functions this task's functions call


@dataclass(frozen=True)
class Exercise:
    id: str                 # "E2"
    module: str             # rtp_course/<module>.py
    title: str
    notebook: str           # notebooks/<notebook>.ipynb
    points: int             # nbgrader points of its grading cell
    tasks: tuple
    world_sizes: tuple = (1, 2, 3, 4)   # a check may narrow these, never widen them
    trains: bool = True     # its checks take optimizer steps (what the ranks preload follows)
    weights: tuple = ()     # (check name, weight) pairs: a check's share of the points; others 1

    @property
    def notebook_number(self) -> str:
        return self.notebook[:2]

    def task_of(self, name: str) -> Task | None:
        """The task covering function/class `name` (or a check named after it)."""
        best, length = None, 0
        for task in self.tasks:
            for n in task.names:
                if name.lower().startswith(n.lower()) and len(n) > length:
                    best, length = task, len(n)
        return best

    def task(self, task_id: str) -> Task:
        return next(t for t in self.tasks if t.id == task_id)


COURSE = (
    Exercise("E1", "data_parallel", "a mini-DDP", "02_data_parallelism", 10, (
        Task("E1.1", ("average_gradients",), 3),
        Task("E1.2", ("DataParallel",), 4))),     # it averages in its own hooks
    Exercise("E2", "comm", "Megatron's f and g as autograd functions", "03_tp_communication", 10, (
        Task("E2.1", ("Duplication", "AllReduce", "duplicate", "all_reduce"), 2),
        Task("E2.2", ("AllGather", "Split", "all_gather", "split"), 3)), trains=False),
    Exercise("E3", "tensor_parallel", "Megatron tensor-parallel layers", "04_tensor_parallel", 20, (
        Task("E3.1", ("ColumnParallelLinear", "ColumnParallel"), 1, ("E2.1", "E2.2")),
        Task("E3.2", ("RowParallelLinear", "RowParallel"), 2, ("E2.1", "E2.2")),
        Task("E3.3", ("ParallelMLP",), 3, ("E3.1", "E3.2")),
        Task("E3.4", ("ParallelEmbedding", "Embedding"), 4, ("E2.2",)),
        Task("E3.5", ("ParallelSelfAttention", "Attention"), 5, ("E2.1", "E3.1", "E3.2")),
        Task("E3.6", ("parallelize_transformer", "Model"), 6, ("E3.1", "E3.2", "E3.3", "E3.4",
                                                               "E3.5")))),
    Exercise("E4", "rotation", "the ring rotation primitive", "05_ring_rotation", 10, (
        Task("E4.1", ("ring_peers",), 1),
        Task("E4.2", ("rotate_async", "RotationHandle", "rotate", "wait"), 2, ("E4.1",)),
        Task("E4.3", ("ring_all_gather",), 3, ("E4.2",)),
        Task("E4.4", ("ring_reduce_scatter",), 4, ("E4.2",))), trains=False),
    Exercise("E5", "flyweight", "Rotated Tensor Parallelism with the Flyweight pattern",
             "06_flyweight_rtp", 25, (
        Task("E5.1", ("FlyweightWrapper",), 2, ("E4.2",)),
        Task("E5.2", ("RotatedTensorParallel",), 3, ("E5.1",)),
        Task("E5.3", ("FlyweightMoE",), 5, ("E5.2",)))),
    Exercise("E6", "groups", "2D parallelism: tensor parallel inside, data parallel across",
             "08_2d_parallelism", 15, (
        Task("E6.1", ("build_groups",), 1),
        Task("E6.2", ("parallelize_2d",), 2, ("E3.6",)),
        # train_step_2d calls sync_gradients, which may call E1's average_gradients (its hint)
        Task("E6.3", ("sync_gradients", "train_step_2d", "train_2d"), 3, ("E1.1", "E6.1", "E6.2"))),
        world_sizes=(1, 2, 4)),
    Exercise("E7", "sharding", "ZeRO-1 and FSDP by hand", "09_sharding", 20, (
        Task("E7.1", ("ShardedOptimizer",), 2),
        Task("E7.2", ("FullyShardedDataParallel",), 3))),
    Exercise("E8", "context_parallel", "ring attention: context parallelism on the rotation",
             "10_context_parallel", 20, (
        Task("E8.1", ("block_attention", "merge_blocks"), 1),
        Task("E8.2", ("ring_attention_forward", "ring_attention", "RingAttention"), 2,
             ("E4.2", "E8.1")),
        # zigzag_unshard may gather with ring_all_gather; E8.3's causal check calls the forward
        Task("E8.3", ("zigzag_shard", "zigzag_unshard", "zigzag"), 3, ("E4.3", "E8.2")),
        Task("E8.4", ("ring_attention_backward", "attention_layer"), 4, ("E4.2", "E8.3"))),
        trains=False),  # its checks write SGD and Adam out (Optimizer): no torch.optim
    Exercise("E9", "pipeline", "pipeline parallelism: stages, GPipe and 1F1B", "11_pipeline", 20, (
        Task("E9.1", ("stage_layers", "PipelineStage"), 1),
        Task("E9.2", ("gpipe",), 2, ("E9.1",)),
        Task("E9.3", ("one_f_one_b",), 3, ("E9.1",)),
        # data_parallel_pipeline runs one_f_one_b and may average with E1's average_gradients
        Task("E9.4", ("data_parallel_pipeline",), 4, ("E1.1", "E9.3")),)),
    Exercise("E10", "experts", "mixture of experts: expert parallelism over all-to-all",
             "12_experts", 20, (
        Task("E10.1", ("AllToAll", "all_to_all"), 2),
        Task("E10.2", ("exchange_splits", "ExpertParallelMoE"), 3, ("E10.1",)),
        Task("E10.3", ("sync_gradients", "train_step"), 4, ("E10.2",)))),
)

# Notebooks graded by questions in their own cells (nbgrader autograded answers), not by checks.
QUIZZES = {"00_why_distributed": 4}

EXERCISES = tuple(e.module for e in COURSE)
GRADED_NOTEBOOKS = tuple(sorted([e.notebook for e in COURSE] + list(QUIZZES)))
BY_MODULE = {e.module: e for e in COURSE}


def exercise(module: str) -> Exercise:
    try:
        return BY_MODULE[module]
    except KeyError:
        raise ValueError(f"unknown exercise {module!r}: choose from {', '.join(EXERCISES)}") from None


def task(task_id: str) -> Task:
    """The task with id `task_id` ("E3.1"), whichever exercise it belongs to."""
    for ex in COURSE:
        for t in ex.tasks:
            if t.id == task_id:
                return t
    raise ValueError(f"unknown task {task_id!r}")


def requirements(task_id: str) -> set:
    """Every task `task_id` uses, directly or through another (its `requires`, closed)."""
    found, todo = set(), list(task(task_id).requires)
    while todo:
        t = todo.pop()
        if t not in found:
            found.add(t)
            todo.extend(task(t).requires)
    return found


def where_taught(module: str, name: str) -> str:
    """'task E4.2, notebook 05 section 2' for function `name` of exercise `module` ('' if unknown)."""
    ex = BY_MODULE.get(module)
    task = ex.task_of(name) if ex else None
    return f"task {task.id}, notebook {ex.notebook_number} section {task.section}" if task else ""


def edition() -> str:
    """"instructor" where this installation has its `instructor` package, else "student".
    Decided by the files next to the running package, so a student edition run beside an
    instructor installation (an editable install's import hook) never borrows its parts."""
    return "instructor" if (Path(__file__).resolve().parents[1] / "instructor").is_dir() else "student"
