"""The harness's switches (NCCL's rules on, the code under test's files, the host-tensor
guard), looked at on every call of the torch.distributed API.

Grading seals them once the harness has set them (confinement/integrity.py). A switch the
code under test turns and turns back before its check ends would escape a look at the end;
a call it makes in between comes through commlog's wrappers, which look first, so turning a
switch around a call shows. What was seen is kept in closures, not in attributes beside them.
"""
from __future__ import annotations


def _sentry():
    sealed: list = []                 # (holder, attribute, value as sealed)
    changed: list = []

    def seal(pairs) -> None:
        sealed[:] = [(holder, name, getattr(holder, name)) for holder, name in pairs]
        changed.clear()

    def look() -> None:
        for holder, name, value in sealed:
            if getattr(holder, name, None) is not value:
                owner = getattr(holder, "__name__", type(holder).__name__)
                changed.append(f"{owner}.{name} was switched")

    def seen() -> list:
        look()
        return list(dict.fromkeys(changed))

    return seal, look, seen


seal, look, seen = _sentry()
