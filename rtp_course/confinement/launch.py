"""A launch's ranks in namespaces of their own (grading only).

On gloo, the launch gets a private network (netns.py): rank 0 makes a user and network
namespace whose only device is its own loopback, the other ranks join it, so no other
launch, classmate's or grader's service is reachable and none can reach them. The launch's
store is served there by a process of its own, forked by rank 0 before anything else (and
outside the rank's PID namespace): no thread of a rank's process was started unconfined to
serve it, so no code under test can run in one. Each CPU rank then has a PID namespace of its own (pidns.py: it can
name no process but its own) and a mount namespace (scratch.py: its private directory a
tmpfs). NCCL ranks keep the machine's network and pid space: NCCL's bootstrap runs over
the machine's interfaces and its transports pass pids between a node's ranks.

Under a root grader the parent also picks the uid its ranks drop to (identity.py); each
rank drops in rank.confine, just before the code under test runs, and the launch's user
namespace maps that uid so that it can.
"""
from __future__ import annotations

import ctypes
import datetime
import os
import time

import torch.distributed as dist

from rtp_course.confinement import identity, netns, pidns, seccomp
from rtp_course.runtime import reaper

# What this rank's launch decided, for rank.confine (set by Isolation.enter in the rank).
ENTERED = {"uid": None}


class Isolation:
    """Given to launcher.launch; pickled to the ranks with the parent's decisions in it."""

    def __init__(self):
        self.private = False
        self.uid = None

    def private_network(self, backend: str) -> bool:
        """In the parent: whether the ranks will serve their own store on a private network
        (and, under a root grader, the uid they will drop to)."""
        self.uid = identity.grading_uid()
        self.private = backend == "gloo" and netns.available()
        return self.private

    def enter(self, rank: int, info, keep=()) -> int | None:
        """In a rank, first thing, with one thread: the launch's namespaces; returns the
        store's port inside them, or None (the parent's store)."""
        ENTERED["uid"] = self.uid
        if _no_new_privs():                   # (the harness execs nothing setuid)
            seccomp.refuse_rings()            # before the store's libuv loop makes one
        if self.uid is not None and os.geteuid() == 0:
            os.setgroups([])                  # none of root's groups, inside the namespace too
        if not self.private:
            return None
        keep = [k for k in keep if k is not None]
        if rank == 0:
            netns.create(info.rundir, also=self.uid)
            _serve_store_apart(info.world_size, close=keep)
        else:
            netns.join(info.rundir)
        if netns.unshare_own() & netns.CLONE_NEWPID:
            pidns.split(close=keep)
        return netns.PORT


def _serve_store_apart(world_size: int, close=()) -> None:
    """Fork the process that serves the launch's store on its private network; it ends
    with the rank that forked it (and with the launch's cgroup)."""
    if os.fork():
        return
    try:
        reaper.die_with_parent()
        for obj in close:
            obj.close()
        quiet = os.open(os.devnull, os.O_WRONLY)       # torch's words about its clients
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        _bound_memory(STORE_MB)
        store = dist.TCPStore("127.0.0.1", netns.PORT, world_size, is_master=True,  # noqa: F841
                              wait_for_workers=False, timeout=datetime.timedelta(seconds=60))
        while True:
            time.sleep(3600)
    finally:
        os._exit(1)


STORE_MB = 256   # what the store may hold beyond the memory it was forked with: a check's keys


def _bound_memory(extra_mb: int) -> None:
    """RLIMIT_DATA at what this process maps now plus `extra_mb`: the store server is no
    rank (no rank's 4 GB cap), and a rank's code can set values in it through the store's
    client (a red team's grew it past 4 GB)."""
    import resource
    with open("/proc/self/status") as fh:
        data_kb = next(int(ln.split()[1]) for ln in fh if ln.startswith("VmData:"))
    limit = (data_kb + extra_mb * 1024) * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _no_new_privs() -> bool:
    return ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0) == 0   # PR_SET_NO_NEW_PRIVS
