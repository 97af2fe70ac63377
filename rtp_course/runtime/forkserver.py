"""Ranks start as forks of a server that imported torch once: multiprocessing's forkserver.

Importing torch takes about 2 s, and the first optimizer step or backward pulls in dynamo
and sympy for 2 s more; a rank forked from a server that did both starts in about 0.1 s.
The server never touches CUDA, so forking it is safe. `start()` launches it at once (the
CLI calls it before importing torch itself, so that both imports run side by side); a
launch uses it through `method()`. $RTP_COURSE_START_METHOD=spawn restores plain spawn.

No torch import here: that is the point of starting the server early.
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
from multiprocessing import forkserver, process, util

from rtp_course.runtime import reaper

PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "torch.fx.experimental.symbolic_shapes",
           "rtp_course.runtime.launcher", "rtp_course.checker.worker"]


def _own_tempdir() -> None:
    """multiprocessing keeps the server's socket in a `pymp-*` directory that only a normal
    exit removes; give it a name of this process's run directories, which the guardian removes
    when this process is killed (multiprocessing reads it from the process config, once)."""
    config = process.current_process()._config
    if config.get("tempdir") is None:
        base = tempfile.gettempdir()
        if len(base) > 60 and os.access("/tmp", os.W_OK):  # its sockets' paths: 107 bytes at most
            base = "/tmp"
        path = tempfile.mkdtemp(prefix=reaper.temp_prefix("mp"), dir=base)
        util.Finalize(None, shutil.rmtree, args=(path, True), exitpriority=-100)
        config["tempdir"] = path


def method() -> str:
    """The start method for launched ranks: "forkserver" (configured) unless overridden."""
    name = os.environ.get("RTP_COURSE_START_METHOD", "forkserver")
    if name == "forkserver":
        _own_tempdir()
        multiprocessing.set_forkserver_preload(PRELOAD)
    return name


def start() -> None:
    """Start the server now (no-op if it runs, or with another start method); returns at once,
    while the server imports."""
    if method() == "forkserver":
        forkserver.ensure_running()
