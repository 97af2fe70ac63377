"""Tampering with the harness, seen from inside the rank: detected, not prevented.

Code under test shares its process with the harness, so it can change the harness's objects
(replace a check's method, a commlog wrapper, a torch.distributed function) or rewrite what
commlog recorded. Nothing in the process can stop that; what it can do is notice the usual
ways of doing it and fail the check with MARK in its message, which the instructor's review
lists (instructor/review_class.py). Code that finds and rewrites this watch too goes unseen:
docs/SECURITY.md says so.

Grading installs the watch (worker.run_checks, confined runs only): a snapshot of the
harness's functions and classes before the code under test is imported, compared after
every check, and a ledger for commlog's record of each check.
"""
from __future__ import annotations

import sys
import types
import warnings

from rtp_course.runtime import commlog

MARK = "HARNESS CHANGED"
WATCHED = ("rtp_course.checker", "rtp_course.runtime", "rtp_course.confinement",
           "rtp_course.course", "rtp_hidden_checks", "torch.distributed")
PYTHON_CACHES = {"__slotnames__", "__abstractmethods__", "_abc_impl"}   # Python adds them itself
_KINDS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
          types.ModuleType, classmethod, staticmethod, property)


class Watch:
    """Made just before the code under test is imported."""

    def __init__(self):
        self.before = _snapshot()
        self.events = self.program = None

    def begin(self) -> None:
        """At the start of a check (after commlog.reset): a ledger for its record."""
        self.events = commlog.STATE.events = _Ledger()
        self.program = commlog.STATE.program = _Ledger()

    def end(self, outcome: dict) -> dict:
        found = _changed(self.before, _snapshot())
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


def _snapshot() -> dict:
    """{'module.name' or 'module.Class.name': object} for the functions, classes and modules
    of the harness's modules, and the attributes of the classes they define."""
    seen = {}
    with warnings.catch_warnings():       # torch's deprecated aliases warn when looked at
        warnings.simplefilter("ignore")
        for name, module in list(sys.modules.items()):
            if module is not None and name.startswith(WATCHED):
                _collect(name, module, seen)
    return seen


def _collect(name: str, module, seen: dict) -> None:
    for attr, value in list(vars(module).items()):
        if not isinstance(value, _KINDS):
            continue
        seen[f"{name}.{attr}"] = value
        if isinstance(value, type) and getattr(value, "__module__", None) == name:
            for a, v in list(vars(value).items()):
                if isinstance(v, _KINDS):
                    seen[f"{name}.{attr}.{a}"] = v
            seen[f"{name}.{attr}.__dict__"] = frozenset(vars(value))   # what it defines


def _changed(before: dict, now: dict) -> list:
    found = []
    for key, value in before.items():
        if key.endswith(".__dict__"):          # a method or a flag given to a class
            added = sorted(now.get(key, value) - value)
            found += [f"{key[:-len('__dict__')]}{a} was added" for a in added
                      if a not in PYTHON_CACHES]
        elif now.get(key) is not value:
            found.append(f"{key} was {'removed' if key not in now else 'replaced'}")
    return found
