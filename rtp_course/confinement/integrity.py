"""Tampering with the harness, seen from inside the rank: detected, not prevented.

Code under test shares its process with the harness, so it can change the harness's objects
(replace a check's method, a commlog wrapper, a torch.distributed function) or rewrite what
commlog recorded. Nothing in the process can stop that; what it can do is notice the usual
ways of doing it and fail the check with MARK in its message, which the instructor's review
lists (instructor/review_class.py). Code that finds and rewrites this watch too goes unseen:
docs/SECURITY.md says so.

Grading installs the watch (worker.run_checks, confined runs only): a snapshot of the
harness's functions and classes (each function's code and defaults too) before the code
under test is imported, compared after every check; the harness's switches sealed, which
commlog looks at on every call (runtime/commlog/sentry.py); and a ledger for commlog's record
of each check. The watch compares with private copies of its own functions, made when it is
installed: rewriting this module's functions afterwards does not blind it.
"""
from __future__ import annotations

import sys
import types
import warnings
from operator import attrgetter, eq, is_, itemgetter

import torch

from rtp_course.runtime import commlog, gpu_placement
from rtp_course.runtime.commlog import sentry

MARK = "HARNESS CHANGED"
WATCHED = ("rtp_course.checker", "rtp_course.runtime", "rtp_course.confinement",
           "rtp_course.course", "rtp_course.training", "rtp_course.models", "rtp_hidden_checks",
           "torch.distributed", "torch.nn.parallel")
# Classes watched whatever module defines them: torch.Tensor's Python methods (register_hook,
# backward, ...), which checks call on their own tensors.
WATCHED_CLASSES = (torch.Tensor,)
PYTHON_CACHES = {"__slotnames__", "__abstractmethods__", "_abc_impl"}   # Python adds them itself
_KINDS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
          types.ModuleType, classmethod, staticmethod, property)


def _switches() -> list:
    """(holder, attribute) of what the harness set for the checks and the code under test
    must leave as it is: NCCL's rules, the code under test's files, the guard that refuses
    host tensors, the status hook, and the tensor factories placement watches."""
    state = commlog.STATE
    pairs = [(state, n) for n in ("nccl_rules", "code_dirs", "guard", "local", "on_status")]
    pairs += [(gpu_placement, "_CODE_DIRS"), (torch.Tensor, "cpu"), (torch.Tensor, "to")]
    pairs += [(torch, f.__name__) for f in (*gpu_placement.FACTORIES, *gpu_placement.HOST_ONLY)]
    pairs += list(gpu_placement.PLACED)
    return pairs


def _private_copies() -> dict:
    """This module's functions, as new function objects over a copy of its globals: what
    the watch runs, whatever is done to the module's own later."""
    space = dict(globals())
    for name, value in list(space.items()):
        if isinstance(value, types.FunctionType) and value.__module__ == __name__:
            space[name] = types.FunctionType(value.__code__, space, value.__name__,
                                             value.__defaults__, value.__closure__)
    return space


class Watch:
    """Made just before the code under test is imported."""

    def __init__(self):
        own = _private_copies()
        self._snapshot, self._changed = own["_snapshot"], own["_changed"]
        # end is looked up on the instance first: a Watch.end replaced later is not what runs
        self.end = types.MethodType(types.FunctionType(Watch.end.__code__, own, "end"), self)
        self._modules = _watched_modules()    # kept: the hidden checks' leave sys.modules
        self._same = own["_same"]
        self._plan: list = []
        self.before = self._snapshot(self._modules, self._plan)
        self._plan = own["_compiled"](self._plan)
        sentry.seal(_switches())
        self._seen = sentry.seen
        self.events = self.program = None

    def begin(self) -> None:
        """At the start of a check (after commlog.reset): a ledger for its record."""
        self.events = commlog.STATE.events = _Ledger()
        self.program = commlog.STATE.program = _Ledger()

    def end(self, outcome: dict) -> dict:
        found = []
        if not self._same(self._plan):    # the full comparison names what changed
            plan: list = []
            found = self._changed(self.before, self._snapshot(self._modules, plan))
            if not found:                 # Python's own caches were added: look from here on
                self._plan = _compiled(plan)
        found += self._seen()
        for name, ledger, now in (("events", self.events, commlog.STATE.events),
                                  ("program", self.program, commlog.STATE.program)):
            if ledger is not None and (now is not ledger or ledger.rewritten()):
                found.append(f"commlog's record of the check ({name}) was rewritten")
        if not found:
            return outcome
        shown = "; ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        return harness_changed(outcome, f"changed the checker's or torch.distributed's "
                                        f"objects: {shown}")


def harness_changed(outcome: dict, what: str) -> dict:
    """The failed outcome that carries MARK: 'the code under test <what>'."""
    return {**outcome, "status": "error", "type": "HarnessChanged",
            "phase": outcome.get("phase", "setup"), "where": outcome.get("where", ""),
            "message": f"{MARK}: the code under test {what}. Code under test computes and "
                       f"communicates; it never changes the harness (this is reported to "
                       f"your instructor)"}


class _Ledger(list):
    """A list that remembers what was appended to it, and what each item said then: a
    rewrite shows. The memory is a closure's, not an attribute beside the list."""

    def __init__(self):
        super().__init__()
        kept: list = []

        def append(item) -> None:
            kept.append((item, _said(item)))
            list.append(self, item)

        def rewritten() -> bool:
            return len(self) != len(kept) or any(
                a is not b or _said(a) != said for a, (b, said) in zip(self, kept))
        self.append, self.rewritten = append, rewritten


def _said(item):
    """What an entry says that no later step may change: an event's call, size, peer, group
    and place, or a program step as a whole."""
    if isinstance(item, tuple):
        return repr(item)
    return tuple(getattr(item, f, None) for f in ("kind", "phase", "nbytes", "peer", "where",
                                                   "family", "group", "members", "batch"))


def _watched_modules() -> dict:
    return {name: module for name, module in list(sys.modules.items())
            if module is not None and name.startswith(WATCHED)}


def _snapshot(modules: dict, plan: list) -> dict:
    """{'module.name' or 'module.Class.name': object} for the functions, classes and modules
    of the harness's `modules`, and the attributes of the classes they define. `plan` gets
    the same facts as (namespace, attribute, object) and ('class', namespace, its names)."""
    seen = {}
    with warnings.catch_warnings():       # torch's deprecated aliases warn when looked at
        warnings.simplefilter("ignore")
        for name, module in modules.items():
            _collect(name, module, seen, plan)
        for cls in WATCHED_CLASSES:
            _collect_class(f"{cls.__module__}.{cls.__qualname__}", cls, seen, plan)
    return seen


def _collect(name: str, module, seen: dict, plan: list) -> None:
    space = vars(module)
    for attr, value in list(space.items()):
        if not isinstance(value, _KINDS):
            continue
        _keep(seen, f"{name}.{attr}", value, plan, space, attr)
        if isinstance(value, type) and getattr(value, "__module__", None) == name:
            _collect_class(f"{name}.{attr}", value, seen, plan)


def _collect_class(key: str, cls: type, seen: dict, plan: list) -> None:
    space = vars(cls)                     # a live view of the class's names
    for a, v in list(space.items()):
        if isinstance(v, _KINDS):
            _keep(seen, f"{key}.{a}", v, plan, space, a)
    seen[f"{key}.__dict__"] = names = frozenset(space)   # what it defines
    plan.append(("class", space, names))


def _keep(seen: dict, key: str, value, plan: list, space, attr: str) -> None:
    """The object, and for a function what it runs: its code and defaults (a function can
    be given other code and stay the same object)."""
    seen[key] = value
    plan.append((space, attr, value))
    function = getattr(value, "__func__", value)
    if isinstance(function, types.FunctionType):
        seen[f"{key} (its code)"] = (function.__code__, function.__defaults__,
                                      function.__kwdefaults__)


_CODE = attrgetter("__code__", "__defaults__", "__kwdefaults__")


def _compiled(plan: list) -> tuple:
    """The snapshot's facts grouped for a comparison in a few calls into C: per namespace,
    one getter of its watched names and the objects they held; the functions and what each
    ran; each class's names. `_same` over it takes about 1 ms where a snapshot takes 10 to 40
    (a rank's 12 000 names, four ranks on two cores)."""
    spaces: dict = {}
    classes, functions = [], []
    for entry in plan:
        if entry[0] == "class":
            classes.append(entry[1:])
            continue
        space, attr, value = entry
        _, attrs, values = spaces.setdefault(id(space), (space, [], []))
        attrs.append(attr)
        values.append(value)
        function = getattr(value, "__func__", value)
        if isinstance(function, types.FunctionType):
            functions.append(function)
    getters = [(space, itemgetter(*attrs) if len(attrs) > 1 else _one(attrs[0]), tuple(values))
               for space, attrs, values in spaces.values()]
    return getters, tuple(functions), tuple(map(_CODE, functions)), classes


def _one(attr: str):
    get = itemgetter(attr)
    return lambda space: (get(space),)


def _same(plan: tuple) -> bool:
    """Whether every watched name still holds its object, every function runs its code
    with its defaults, and every class defines the names it did (identity, not equality)."""
    getters, functions, ran, classes = plan
    try:
        if not all(all(map(is_, get(space), values)) for space, get, values in getters):
            return False
    except KeyError:                      # a name removed
        return False
    return (all(all(map(is_, now, then)) for now, then in zip(map(_CODE, functions), ran))
            and all(eq(frozenset(space), names) for space, names in classes))


def _changed(before: dict, now: dict) -> list:
    found = []
    for key, value in before.items():
        if key.endswith(".__dict__"):          # a method or a flag given to a class
            added = sorted(now.get(key, value) - value)
            found += [f"{key[:-len('__dict__')]}{a} was added" for a in added
                      if a not in PYTHON_CACHES]
        elif key.endswith(" (its code)"):
            if key in now and any(a is not b for a, b in zip(now[key], value)):
                found.append(f"{key[:-len(' (its code)')]} was given other code")
        elif now.get(key) is not value:
            found.append(f"{key} was {'removed' if key not in now else 'replaced'}")
    return found
