"""What launched ranks print, captured and capped by the launching process.

A rank's stdout and stderr are FIFOs in its run directory that a thread of the launcher
drains, so whatever a rank writes (a gigabyte of prints, a flood from a child it started)
neither reaches the launcher's own streams nor fills a disk: each stream keeps its first
and last CAP/2 bytes, in `stdout.R.txt` and `stderr.R.txt` of the run, with the count of
what was dropped between them. A rank that writes faster than the launcher drains waits
(a pipe's back-pressure), as it would on a terminal.
"""
from __future__ import annotations

import collections
import contextlib
import os
import selectors
import threading
import time
from pathlib import Path

CAP = 256 << 10        # bytes kept of one stream of one rank
STREAMS = ("stdout", "stderr")


def fifo(rundir: Path, stream: str, rank: int) -> Path:
    return Path(rundir) / f"{stream}.{rank}.fifo"


def text(rundir: Path, stream: str, rank: int) -> Path:
    return Path(rundir) / f"{stream}.{rank}.txt"


def attach(rundir: str, rank: int) -> None:
    """In the rank, before anything of its own runs: its fds 1 and 2 become its FIFOs."""
    for target, stream in ((1, "stdout"), (2, "stderr")):
        fd = os.open(fifo(Path(rundir), stream, rank), os.O_WRONLY)
        os.dup2(fd, target)
        os.close(fd)


class _Kept:
    """One stream: its head written to the text file as it comes, its tail in memory."""

    def __init__(self, path: Path, cap: int):
        self.path, self.half = path, cap // 2
        self.file = open(path, "wb")
        self.head = 0
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_size = self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.half - self.head
        if room > 0:
            self.file.write(data[:room])
            self.file.flush()
            self.head += min(room, len(data))
            data = data[room:]
        if not data:
            return
        self.tail.append(data)
        self.tail_size += len(data)
        while self.tail_size - len(self.tail[0]) >= self.half:
            self.tail_size -= len(self.tail[0])
            self.dropped += len(self.tail.popleft())

    def write_out(self) -> None:
        """The text file: the head, then what was dropped, then the tail."""
        tail = b"".join(self.tail)
        cut = max(0, len(tail) - self.half)
        dropped, tail = self.dropped + cut, tail[cut:]
        with open(self.path, "r+b") as fh:
            fh.seek(self.head)
            if dropped:
                fh.write(f"\n[... {dropped} bytes not kept: a stream keeps its first and last "
                         f"{self.half >> 10} KB ...]\n".encode())
            fh.write(tail)
            fh.truncate()

    def close(self) -> None:
        self.file.close()


class Capture:
    """The FIFOs of every rank of one launch, and the thread that drains them."""

    def __init__(self, rundir: Path, world_size: int, cap: int = CAP):
        self._sel = selectors.DefaultSelector()
        self._keep_open = []          # a writer of our own: no EOF before a rank has opened its end
        self._kept: dict[int, _Kept] = {}
        for rank in range(world_size):
            for stream in STREAMS:
                path = fifo(rundir, stream, rank)
                os.mkfifo(path, 0o600)
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                self._keep_open.append(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                self._kept[fd] = _Kept(text(rundir, stream, rank), cap)
                self._sel.register(fd, selectors.EVENT_READ)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True, name="rank-output")
        self._thread.start()

    def _drain(self) -> None:
        open_fds = set(self._kept)
        deadline = None
        while open_fds:
            if self._closing.is_set():
                deadline = deadline or time.monotonic() + 1.0   # a writer that escaped the run
                if time.monotonic() > deadline:
                    break
            for key, _ in self._sel.select(timeout=0.1):
                fd = key.fd
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._sel.unregister(fd)
                    open_fds.discard(fd)
                    continue
                with self._lock:
                    self._kept[fd].add(data)

    def flush(self) -> None:
        """Bring the text files up to date (a rank's last words, read after it failed)."""
        time.sleep(0.05)                                  # what it wrote before dying
        with self._lock:
            for kept in self._kept.values():
                kept.write_out()

    def close(self) -> None:
        """After the ranks have ended: read what remains, write the files, close everything."""
        for fd in self._keep_open:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._closing.set()
        self._thread.join()
        for fd, kept in self._kept.items():
            kept.write_out()
            kept.close()
            with contextlib.suppress(OSError):
                os.close(fd)
        self._sel.close()
