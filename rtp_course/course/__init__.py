"""The course in one table: its exercises, their tasks, notebooks, points and world sizes.

Every other place (CLI, checker, notebooks' hints, nbgrader configuration and
source builder, submission collector, release, tests) derives from `COURSE`.
Adding an exercise is one row here plus its files: the stub
`rtp_course/<module>.py`, its reference `solutions/<module>.py`, its public
checks `rtp_course/checker/public/<module>.py` and its notebook.

A task is one numbered step of an exercise, "E2.1". The same id marks the TODO
in the stub, the notebook section that teaches it, and every check of it, so a
failing check says where to read.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Task:
    id: str                 # "E2.1"
    names: tuple            # the functions and classes of the exercise module it covers
    section: int            # the numbered section of the notebook that teaches it


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
        Task("E1.2", ("DataParallel",), 4))),
    Exercise("E2", "comm", "Megatron's f and g as autograd functions", "03_tp_communication", 10, (
        Task("E2.1", ("Duplication", "AllReduce", "duplicate", "all_reduce"), 2),
        Task("E2.2", ("AllGather", "Split", "all_gather", "split"), 3)), trains=False),
    Exercise("E3", "tensor_parallel", "Megatron tensor-parallel layers", "04_tensor_parallel", 20, (
        Task("E3.1", ("ColumnParallelLinear", "ColumnParallel"), 1),
        Task("E3.2", ("RowParallelLinear", "RowParallel"), 2),
        Task("E3.3", ("ParallelMLP",), 3),
        Task("E3.4", ("ParallelEmbedding", "Embedding"), 4),
        Task("E3.5", ("ParallelSelfAttention", "Attention"), 5),
        Task("E3.6", ("parallelize_transformer", "Model"), 6))),
    Exercise("E4", "rotation", "the ring rotation primitive", "05_ring_rotation", 10, (
        Task("E4.1", ("ring_peers",), 1),
        Task("E4.2", ("rotate_async", "RotationHandle", "rotate", "wait"), 2),
        Task("E4.3", ("ring_all_gather",), 3),
        Task("E4.4", ("ring_reduce_scatter",), 4)), trains=False),
    Exercise("E5", "flyweight", "Rotated Tensor Parallelism with the Flyweight pattern",
             "06_flyweight_rtp", 25, (
        Task("E5.1", ("FlyweightWrapper",), 2),
        Task("E5.2", ("RotatedTensorParallel",), 3))),
    Exercise("E6", "groups", "2D parallelism: tensor parallel inside, data parallel across",
             "08_2d_parallelism", 15, (
        Task("E6.1", ("build_groups",), 1),
        Task("E6.2", ("parallelize_2d",), 2),
        Task("E6.3", ("sync_gradients", "train_step_2d", "train_2d"), 3)),
        world_sizes=(1, 2, 4)),
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
