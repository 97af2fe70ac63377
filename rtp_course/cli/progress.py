"""A one-line progress bar on a terminal's stderr, erased before the report is printed.

Nothing at all when stderr is not a terminal: a pipe or a log file gets the report alone,
never progress lines interleaved with it."""
from __future__ import annotations

import sys


class Bar:
    def __init__(self, stream=None, width: int = 24):
        self.stream = stream or sys.stderr
        self.width = width
        self.live = self.stream.isatty()

    def __call__(self, done: int, total: int, label: str) -> None:
        if not self.live or total <= 0:
            return
        filled = round(self.width * min(done, total) / total)
        self.stream.write(f"\r\033[K  [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{min(done, total)}/{total} checks  {label}")
        self.stream.flush()

    def clear(self) -> None:
        if self.live:
            self.stream.write("\r\033[K")
            self.stream.flush()
