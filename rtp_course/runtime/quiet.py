"""Output a person reads carries the course's words, not torch's.

torch's deprecation and future warnings are for the course's maintainers, not
for a student reading a report. The parent filters them here; each launched
rank sends its whole stderr to a file of its run (launcher), and the report
quotes that file only when a rank crashed.
"""
from __future__ import annotations

import warnings

CATEGORIES = (FutureWarning, DeprecationWarning, UserWarning)


def torch_warnings(everywhere: bool = False) -> None:
    """Ignore torch's warnings (every module's with `everywhere`, as in a rank whose stderr
    nobody reads as it runs)."""
    for category in CATEGORIES:
        if everywhere and category is not UserWarning:
            warnings.filterwarnings("ignore", category=category)
        else:
            warnings.filterwarnings("ignore", category=category, module=r"torch(\.|$)")
