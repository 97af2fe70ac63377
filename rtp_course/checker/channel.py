"""Each rank's own inputs, as values, over a channel of its own to the checker's parent.

A rank's own data (its batch, its shard, its initial weights) is drawn from a key only
the parent holds (checker/inputs.py). A rank asks the parent for each of its tensors
over a socketpair whose other end only the parent holds, and gets values, never what
they are drawn from: another rank that wants them must communicate them, in full. The
channel carries the harness's requests only, never the traffic of the code under test.

    rank:   ask({"what": "randn", "seed": 3, "shape": [4, 2], "owner": [1]}, 5)   (check 5)
    parent: Server(world_size, provider).start(); serves each rank in a thread of its own

Just before the code under test is imported, each rank says so (`enter()`): from then on,
what the rank does may be that code's. The parent keeps that fact (`Server.entered`), which
no rank can take back, and decides from it, never from a file the rank writes, whether a
broken launch was the machine's doing (checker/group.py).

A request is one frame (wire.py), bounded before it is read; what a rank sends wrong ends
its channel (its next request fails), never the parent.
"""
from __future__ import annotations

import contextlib
import select
import socket
import threading

from rtp_course.checker import wire

_LINK: "_Link | None" = None
ENTER = "enter"          # a rank's word that the code under test runs from now on


class ChannelError(RuntimeError):
    """The parent refused a request, or the channel is gone."""


class Server:
    """The parent's ends of a launch's channels, each served by a thread: `provider.serve(
    rank, request, check_index)` answers (header, tensors) or a Future of them."""

    def __init__(self, world_size: int, provider):
        self.world_size, self.provider = world_size, provider
        pairs = [socket.socketpair() for _ in range(world_size)]
        self._ours = [a for a, _ in pairs]
        self._theirs = [b for _, b in pairs]
        self._serving = 0        # requests being computed (a rank waits for the parent)
        self._reading: set = set()   # ranks whose thread waits for their next request
        self.entered: set = set()    # ranks that began to run the code under test
        self._lock = threading.Lock()
        self._threads = []

    def rank_ends(self) -> list:
        """What the launcher hands the ranks (each keeps its own and closes the others)."""
        return self._theirs

    def close_rank_ends(self) -> None:
        """After the ranks started: a rank's exit now ends its channel."""
        for s in self._theirs:
            s.close()

    def start(self) -> "Server":
        for rank, sock in enumerate(self._ours):
            t = threading.Thread(target=self._serve, args=(rank, sock), daemon=True,
                                 name=f"inputs-{rank}")
            t.start()
            self._threads.append(t)
        return self

    def busy(self) -> bool:
        """A rank waits for the parent now (its ranks are blocked, not hung): a request is
        being computed, or one waits to be read by a thread that is free to read it. A reply
        the rank does not read is the rank's wait, not the parent's: it counts for nothing."""
        with self._lock:
            if self._serving > 0:
                return True
            free = [self._ours[r] for r in self._reading]
        try:
            readable, _, _ = select.select([s for s in free if s.fileno() >= 0], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(readable)

    def stop(self) -> None:
        for s in self._ours:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in self._threads:
            t.join(timeout=2.0)

    def _serve(self, rank: int, sock: socket.socket) -> None:
        stream = sock.makefile("rb")
        last = -1
        while True:
            with self._lock:
                self._reading.add(rank)
            try:
                header, payload = wire.read_frame(stream)
            except (EOFError, OSError, ValueError):
                return                     # the rank left, or broke the protocol
            finally:
                with self._lock:
                    self._reading.discard(rank)
            with self._lock:
                self._serving += 1
            try:
                if header.get("what") == ENTER:
                    self.entered.add(rank)
                    reply, tensors = {}, []
                else:
                    reply, tensors, last = self._answer(rank, header, last)
            finally:
                with self._lock:
                    self._serving -= 1
            try:
                wire.send(sock, wire.encode(reply, tensors))
            except (OSError, ValueError):
                return

    def _answer(self, rank: int, header: dict, last: int):
        """(reply, tensors, the check index now): a rank asks only in its current check or a
        later one, never an earlier."""
        index = header.get("index")
        if type(index) is not int or index < last:
            return {"error": "inputs are served in the check a rank is in, in order"}, [], last
        try:
            got = self.provider.serve(rank, header, index)
            if hasattr(got, "result"):
                got = got.result()
        except Exception as e:  # noqa: BLE001 - refused: the rank is told, the parent goes on
            return {"error": f"input refused: {e}"}, [], index
        return got[0], got[1], index


class _Link:
    def __init__(self, sock: socket.socket):
        self.sock, self.stream = sock, sock.makefile("rb")
        self.lock = threading.Lock()


def connect(sock: socket.socket) -> None:
    """In a rank: take its end of its channel."""
    global _LINK
    _LINK = _Link(sock)


def connected() -> bool:
    return _LINK is not None


def enter() -> None:
    """In a rank, just before the code under test is imported (see the top)."""
    ask({"what": ENTER}, -1)


def ask(request: dict, check: int):
    """(reply header, tensors) for `request` in the rank's check number `check`."""
    if _LINK is None:
        raise ChannelError("this process has no channel to the checker")
    with _LINK.lock:
        try:
            wire.send(_LINK.sock, wire.encode({**request, "index": check}))
            header, payload = wire.read_frame(_LINK.stream)
        except (EOFError, OSError) as e:
            raise ChannelError(f"the checker's channel closed ({e})") from None
    if "error" in header:
        raise ChannelError(str(header["error"])[:500])
    return header, wire.tensors_of(header, payload)
