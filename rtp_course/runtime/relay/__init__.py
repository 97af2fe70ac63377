"""The checker's transport: every byte a rank sends another crosses a relay in the grader.

A checker rank on CPU does not talk to its peers. Its torch.distributed calls go to a
process group of its own kind (`group.RelayGroup`, backend "relay"), which sends each
operation, with its tensors, over a socketpair to the relay (`server.Relay`), a thread of
the launcher. The relay matches the ranks' operations (the k-th collective of every member
of a group; a send with the receive its peer posted), computes what each rank gets back,
and keeps the account of what each rank sent and received (`server.Account`). So:

* no rank can reach another except through the relay: the launch has no TCP store and
  no gloo sockets, each rank runs in a network and IPC namespace of its own, and its
  socketpair end is a file descriptor it inherited, not an address another process can
  connect to;
* what a rule judges (operations, bytes, peers) is what the relay saw, outside the ranks,
  not what the rank's own log says;
* the relay follows NCCL where a grade depends on it: a send completes when its receive
  is posted (a ring of blocking sends deadlocks, as on a GPU), no receive from any source.

Frames are a fixed header, JSON text and raw tensor bytes (`wire`): nothing a rank sends
is unpickled, and every size is bounded before anything is allocated.
"""

import torch as _torch

# The relay's process group is written in Python, and torch's C++ (the functional
# collectives, DTensor, torch's own DDP) waits on its handles: torch calls a Python handle's
# wait() from C++ only from this version on (2.6 blocks for ever there).
MIN_TORCH = (2, 7)


def supported() -> bool:
    """Whether this torch can run checker ranks through the relay (else they use gloo, as
    before the relay: their logs are then their own word)."""
    version = tuple(int(p) for p in _torch.__version__.split("+")[0].split(".")[:2])
    return version >= MIN_TORCH
