"""The harness's switches (NCCL's rules on, the code under test's files, the host-tensor
guard), looked at on every call of the torch.distributed API.

Grading seals them once the harness has set them (confinement/integrity.py). A switch the
code under test turns and turns back before its check ends would escape a look at the end;
a call it makes in between comes through commlog's wrappers, which look first, so turning a
switch around a call shows. What was seen is kept in closures, not in attributes beside them.

A trace or profile function (sys.settrace, a debugger such as bdb, a profiler) sees every
frame's locals, the wrappers' own included: the harness sets none, so one set while a
sealed rank calls torch.distributed, or at a check's end, is a change too.
"""
from __future__ import annotations

import sys
import threading

_HOOKS = (("sys.settrace", sys.gettrace), ("sys.setprofile", sys.getprofile),
          ("threading.settrace", threading.gettrace),
          ("threading.setprofile", threading.getprofile))


def _sentry():
    sealed: list = []                 # (holder, attribute, value as sealed)
    changed: list = []
    hooks = _HOOKS                    # in a closure: rebinding the module's name changes nothing

    def seal(pairs) -> None:
        sealed[:] = [(holder, name, getattr(holder, name)) for holder, name in pairs]
        changed.clear()

    def look() -> None:
        for holder, name, value in sealed:
            if getattr(holder, name, None) is not value:
                owner = getattr(holder, "__name__", type(holder).__name__)
                changed.append(f"{owner}.{name} was switched")
        if sealed:
            changed.extend(f"a function was set with {name} (it reads the harness's frames)"
                           for name, get in hooks if get() is not None)

    def seen() -> list:
        look()
        return list(dict.fromkeys(changed))

    def note(what: str) -> None:
        """A change seen elsewhere (commlog's wrappers), while sealed."""
        if sealed:
            changed.append(what)

    return seal, look, seen, note


seal, look, seen, note = _sentry()
