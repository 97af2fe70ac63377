"""What a check is, and where checks are found.

A check has two halves that never meet in one process:

* `run(ctx)` runs in every worker rank with the code under test and records
  what it observed (`ctx.record`);
* `expected(world_size)` and `comm_rules(world_size)` run in the parent with
  serial torch only, and say what each rank should have observed.

The verdict (verdict.py) compares the two in the parent. A worker loads its checks
with `side="run"`: the parent-side methods (PARENT_SIDE) of every loaded check class are
replaced by a refusal before the code under test runs, so code under test that finds a
check object cannot ask it for the answer it is judged against.
"""
from __future__ import annotations

import contextlib
import importlib
import linecache
import types
from dataclasses import dataclass
from pathlib import Path

from rtp_course import course
from rtp_course.course import material

PUBLIC_PACKAGE = "rtp_course.checker.public"
# What only the parent may call: the expected values and rules, and the serial runs behind them.
PARENT_SIDE = ("expected", "comm_rules", "expected_rank", "serial_trace")


@dataclass(frozen=True)
class Bound:
    """An expected number given as a range instead of a value (memory, counts)."""
    low: float = float("-inf")
    high: float = float("inf")
    what: str = ""

    def __contains__(self, x) -> bool:
        return self.low <= x <= self.high

    def __str__(self):
        if self.low == float("-inf"):
            return f"at most {self.high:g}"
        if self.high == float("inf"):
            return f"at least {self.low:g}"
        return f"between {self.low:g} and {self.high:g}"


@dataclass(frozen=True)
class Like:
    """An expected tensor, with what a wrong one would be if it came from a known mistake (a
    bool mask read the other way round): [(tensor, cause, hint)]. The verdict names that cause
    and hint where the recorded tensor matches one."""
    value: object
    lookalikes: tuple = ()


@dataclass(frozen=True)
class CommRule:
    """Per rank, in `phase` ("*": every phase), the calls of `kind` must number `count` (a
    Bound or an int).

    kind names operations or functions, "|"-separated: "all_gather" counts every API that
    all-gathers (all_gather, all_gather_into_tensor, all_gather_single, the functional
    collectives ...: runtime/commlog.py's families), so no rule requires one API. "*"
    counts every call; "collective" every call but send/recv/isend/irecv; "p2p" those; "!"
    before the names counts every call of another operation.
    `nbytes` optionally bounds the bytes of those calls (sent, or for recv/irecv received). `peers` optionally
    lists the only ranks those calls may talk to (as the code passed them). `members`
    optionally gives the global ranks of the only process group those calls may run on
    (rule 'Group': an extra call on another group is refused whatever the count); a rule with
    `members` is judged before the values, whose difference it explains.
    """
    phase: str
    kind: str
    count: object
    hint: str = ""
    nbytes: object = None
    peers: tuple | None = None
    members: tuple | None = None




class Check:
    exercise: str = ""
    name: str = ""
    world_sizes: tuple | None = None   # default: the exercise's, from the course table
    hidden: bool = False
    cpu_budget: float = 40.0    # CPU-seconds its ranks may use, together, at one world size
    dtype: str = "float64"
    tolerance: dict = {}        # {torch dtype: (rtol, atol)} over verdict.TOLERANCE, where this
                                # check can tell float32 rounding on the way from its own noise
    hints: dict = {}            # key prefix -> hint shown when that key is wrong; the keys
                                # "error/<phase>", "error", "deadlock": for an exception, a hang;
                                # "<part>#scaled": for a tensor that is a multiple of the expected;
                                # "error#<form>", "error/<phase>#<form>": for an exception of that
                                # kind (verdict.EXCEPTION_FORMS: none, hook, size)

    task: str = ""              # "E2.1"; default: the task whose function the name starts with
    owned: tuple = ()           # attribute paths of this check that build a module a rank owns
                                # (common.owned_module: the parent builds it for the rank)
    isolated: bool = False      # its failure says nothing about the functions other checks use
                                # (a ValueError asked for): never named as their likely cause
    follows: tuple = ()         # names of checks of its own task whose functions this one runs
                                # (attention_layer runs ring_attention_backward): their failure
                                # is named as this one's likely cause

    @property
    def id(self) -> str:
        return f"{self.exercise}.{self.name}"

    @property
    def task_id(self) -> str:
        if self.task:
            return self.task
        found = course.exercise(self.exercise).task_of(self.name)
        return found.id if found else ""

    def quoting_rule(self, hint: str) -> str:
        """A communication rule's hint, quoting the stub's rule it enforces."""
        if "rule '" in hint:
            return hint
        return f"rule 'Communication': {hint}" if hint else "rule 'Communication'"

    def applies(self, world_size: int) -> bool:
        return world_size in (self.world_sizes or course.exercise(self.exercise).world_sizes)

    def run(self, ctx) -> None:
        raise NotImplementedError

    def expected(self, world_size: int) -> dict:
        """{rank: {key: tensor | number | Bound}}; keys match ctx.record keys."""
        return {}

    def comm_rules(self, world_size: int) -> list:
        """[CommRule] for every rank, or {rank: [CommRule]} where ranks differ (peers)."""
        return []

    def factors(self, world_size: int) -> list:
        """[(factor, cause, hint)]: what a wrong tensor that is `factor` x the expected one
        comes from in this check (a scale of its shapes left out), named before the world
        size's sum-for-a-mean; choose shapes whose factors differ from the world sizes'."""
        return []

    def hint(self, key: str, form: str = "") -> str:
        """The hint of the longest hints key found in `key`; with `form`, only among the keys
        written `<part of key>#<form>` (a hint for one kind of cause)."""
        best = ""
        for name in self.hints:
            part, _, its_form = name.partition("#")
            if its_form == form and part in key and len(name) > len(best):
                best = name
        return self.hints.get(best, "")


def hidden_dir() -> Path | None:
    """The hidden checks, where the instructor edition says they are (None in the student edition)."""
    return material.hidden_checks_dir()


def check_modules(exercises, hidden: bool) -> list[str]:
    """Module names holding the checks of `exercises` (public, plus hidden if asked)."""
    mods = []
    for ex in exercises:
        if importlib.util.find_spec(f"{PUBLIC_PACKAGE}.{ex}") is not None:
            mods.append(f"{PUBLIC_PACKAGE}.{ex}")
    if hidden:
        d = hidden_dir()
        if d is None:
            raise FileNotFoundError("hidden checks are not in this edition: they stay with the "
                                    "instructor (tests/hidden); run without --hidden")
        for ex in exercises:
            if (d / f"{ex}.py").exists():
                mods.append(f"hidden::{d / ex}.py")
    return mods


def load_checks(modules, side: str = "parent") -> list[Check]:
    """Instantiate every Check subclass defined in `modules`, in definition order.

    side="run" (a worker, before the code under test runs): without the parent side."""
    checks = []
    for mod_name in modules:
        mod = _import(mod_name)
        for obj in vars(mod).values():
            if (isinstance(obj, type) and issubclass(obj, Check) and obj is not Check
                    and obj.__module__ == mod.__name__ and obj.name):
                checks.append(obj())
    seen: dict[str, str] = {}
    for check in checks:   # ids name result files and reports: one check each
        if check.id in seen:
            raise ValueError(f"two checks are named {check.id} ({seen[check.id]} and "
                             f"{type(check).__module__}.{type(check).__name__}): rename one")
        seen[check.id] = f"{type(check).__module__}.{type(check).__name__}"
    if side == "run":
        for check in checks:
            _without_parent_side(type(check))
        linecache.clearcache()  # no source lines of a hidden check kept from a traceback
    return checks


def out_of_sight() -> None:
    """In a rank, once the checks are loaded and before the code under test is imported: the
    hidden checks' modules leave the module table and their `__doc__`s go. Their classes
    stay (the rank runs them), reachable through the objects that use them (and with them
    their module's globals and their code's constants: docs/SECURITY.md)."""
    import sys
    for name in [n for n in sys.modules if n.startswith("rtp_hidden_checks.")]:
        module = sys.modules.pop(name)
        for value in [module, *vars(module).values()]:
            if getattr(value, "__module__", name) != name:
                continue
            for member in [value, *(vars(value).values() if isinstance(value, type) else ())]:
                function = getattr(member, "__func__", member)
                if isinstance(function, (type, types.FunctionType, types.ModuleType)):
                    with contextlib.suppress(AttributeError, TypeError):
                        function.__doc__ = None


def _refuse(name: str):
    def refused(*args, **kwargs):
        raise RuntimeError(f"{name}() is computed in the checker's parent process only: expected "
                           f"values never enter a process that runs the code under test")
    return refused


def _without_parent_side(cls) -> None:
    """Replace the parent-side methods in every class of `cls`'s MRO (this process only): the
    functions themselves are then unreferenced and freed, a hidden check's with them."""
    for klass in cls.__mro__:
        for name in PARENT_SIDE:
            if name in vars(klass) and not getattr(vars(klass)[name], "_refused", False):
                refused = _refuse(f"{klass.__name__}.{name}")
                refused._refused = True
                setattr(klass, name, refused)


def _import(mod_name: str):
    if mod_name.startswith("hidden::"):
        path = Path(mod_name[len("hidden::"):])
        name = f"rtp_hidden_checks.{path.stem}"
        import sys
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(mod_name)
