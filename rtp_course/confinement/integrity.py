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
    pairs += [(torch, f.__name__) for f in gpu_placement.FACTORIES]
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
        self.before = self._snapshot(self._modules)
        sentry.seal(_switches())
        self._seen = sentry.seen
        self.events = self.program = None

    def begin(self) -> None:
        """At the start of a check (after commlog.reset): a ledger for its record."""
        self.events = commlog.STATE.events = _Ledger()
        self.program = commlog.STATE.program = _Ledger()

    def end(self, outcome: dict) -> dict:
        found = self._changed(self.before, self._snapshot(self._modules)) + self._seen()
        for name, ledger, now in (("events", self.events, commlog.STATE.events),
                                  ("program", self.program, commlog.STATE.program)):
            if ledger is not None and (now is not ledger or ledger.rewritten()):
                found.append(f"commlog's record of the check ({name}) was rewritten")
        if not found:
            return outcome
        shown = "; ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        return {**outcome, "status": "error", "type": "HarnessChanged",
                "phase": outcome.get("phase", "setup"), "where": outcome.get("where", ""),
                "message": f"{MARK}: the code under test changed the checker's or "
                           f"torch.distributed's objects: {shown}. Code under test computes "
                           f"and communicates; it never changes the harness (this is "
                           f"reported to your instructor)"}


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


def _snapshot(modules: dict) -> dict:
    """{'module.name' or 'module.Class.name': object} for the functions, classes and modules
    of the harness's `modules`, and the attributes of the classes they define."""
    seen = {}
    with warnings.catch_warnings():       # torch's deprecated aliases warn when looked at
        warnings.simplefilter("ignore")
        for name, module in modules.items():
            _collect(name, module, seen)
        for cls in WATCHED_CLASSES:
            _collect_class(f"{cls.__module__}.{cls.__qualname__}", cls, seen)
    return seen


def _collect(name: str, module, seen: dict) -> None:
    for attr, value in list(vars(module).items()):
        if not isinstance(value, _KINDS):
            continue
        _keep(seen, f"{name}.{attr}", value)
        if isinstance(value, type) and getattr(value, "__module__", None) == name:
            _collect_class(f"{name}.{attr}", value, seen)


def _collect_class(key: str, cls: type, seen: dict) -> None:
    for a, v in list(vars(cls).items()):
        if isinstance(v, _KINDS):
            _keep(seen, f"{key}.{a}", v)
    seen[f"{key}.__dict__"] = frozenset(vars(cls))   # what it defines


def _keep(seen: dict, key: str, value) -> None:
    """The object, and for a function what it runs: its code and defaults (a function can
    be given other code and stay the same object)."""
    seen[key] = value
    function = getattr(value, "__func__", value)
    if isinstance(function, types.FunctionType):
        seen[f"{key} (its code)"] = (function.__code__, function.__defaults__,
                                      function.__kwdefaults__)


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
