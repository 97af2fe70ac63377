"""A handle of an asynchronous call, as commlog returns it: its waits are logged and named."""
from __future__ import annotations

import threading
import time

from rtp_course.runtime.commlog.state import P2P, RECEIVES, STATE, _completed, _status


POLL_PAUSE = 0.001     # s: is_completed() that says no gives up the CPU this long
MAX_DROPPED_NAMED = 4  # works let go unwaited named in the rank's status, per check
_kept: list = []       # works whose handles were dropped unwaited, until they are done


class _Work:
    """Wraps an async handle: a wait() that blocks forever is reported with its peer, and the
    events it covers (one call, or all of a coalesced batch) are marked completed. Under
    NCCL's rules a work may be waited again (gloo's point-to-point work would block for ever)
    and completes by itself (gloo's says so only inside wait())."""

    def __init__(self, work, kind, where, indices=(), after=None, sent=()):
        self._work, self._kind, self._where, self._indices = work, kind, where, list(indices)
        self._events = STATE.events   # the check's list: a handle kept into the next check
        self._program = STATE.program
        self._after = after           # what finishes the result once it is there (AVG's division)
        self._sent = [(t, t._version) for t in sent]   # send buffers, and their version then
        self._waited = False          # a wait() returned: a second one is named as such
        self._progress = None         # (thread, event, error) of a wait in the background
        self._adopted = False         # its work now belongs to a batch's handle

    def _mark_completed(self):
        if self._events is STATE.events:
            for i in self._indices:
                _completed(STATE.events[i])
        for t, version in self._sent:
            if t._version != version:
                for i in self._indices:
                    if self._events[i].family in ("send", "isend"):
                        self._events[i].overwritten = True
        self._sent = []

    # NCCL rule 'repeated waits' (DESIGN.md)
    def wait(self, *a, **k):
        if self._program is STATE.program:
            STATE.program.append(("wait", list(self._indices)))
        if STATE.trace is not None:
            STATE.trace.extend(("wait", i) for i in self._indices)
        if self._waited and STATE.nccl_rules:
            return True                # NCCL: waiting again on a completed work returns at once
        p2p = [self._events[i] for i in self._indices if self._events[i].family in P2P]
        receives = [e for e in p2p if e.family in RECEIVES]
        one = receives if receives else p2p          # the receive of a batch says most
        again = " again" if self._waited else ""
        _status(f"wait(){again} on {self._kind} from {self._where}",
                family=one[0].family if len(one) == 1 else self._kind,
                peer=one[0].peer if len(one) == 1 else None)
        try:
            out = self._wait(*a, **k)
            self._waited = True
            self._mark_completed()
            if self._after is not None:
                self._after, after = None, self._after
                after()
        finally:
            _status(None)
        return out

    def _wait(self, *a, **k):
        if self._progress is None:
            return self._work.wait(*a, **k)
        thread, done, error = self._progress
        done.wait()
        if error:
            raise error[0]
        return True

    # NCCL rule 'completion without wait' (DESIGN.md)
    def is_completed(self):
        if self._waited:
            return True
        if STATE.nccl_rules and any(self._events[i].family in P2P for i in self._indices):
            done = self._in_background()
        else:
            done = self._work.is_completed()
        if done:
            self._mark_completed()
        else:
            # A loop that polls this waits for its peers: without a pause it burns CPU for as
            # long as they take, which a busy machine stretches, and budgets are CPU time.
            time.sleep(POLL_PAUSE)
        return done

    def _in_background(self) -> bool:
        """Whether the work is done, as NCCL's query says without a wait: gloo's point-to-point
        work says so only inside wait(), so a thread waits for it (once)."""
        if self._progress is None:
            done, error = threading.Event(), []

            def wait():
                try:
                    self._work.wait()
                except BaseException as e:  # noqa: BLE001 - raised by the caller's wait()
                    error.append(e)
                done.set()
            thread = threading.Thread(target=wait, daemon=True, name="nccl-progress")
            self._progress = (thread, done, error)
            thread.start()
        return self._progress[1].is_set()

    # NCCL rule 'a handle let go unwaited' (DESIGN.md)
    def __del__(self):
        """A handle let go unwaited. NCCL runs its operation all the same (the group's stream
        completes it); gloo's point-to-point work destroyed unwaited can leave the pair
        stuck, so that the next transfer on it spins or hangs. As NCCL would, the operation
        is kept until it is done; the check names the work if it fails, and the rank's
        status names it if the rank crashes (the work wrote into a tensor freed since)."""
        try:
            if self._waited or self._adopted or not STATE.nccl_rules \
                    or getattr(STATE.local, "batch", None) is not None:   # a batch's own op
                return
            pending = [self._events[i] for i in self._indices if not self._events[i].completed]
            if not pending:
                return
            for e in pending:
                e.dropped = True
                if e.family == "isend":
                    STATE.dropped_to[e.peer] = STATE.dropped_to.get(e.peer, 0) + 1
            if self._events is STATE.events and len(STATE.dropped_works) < MAX_DROPPED_NAMED:
                # named in the rank's status: a crash (a freed tensor the work still writes
                # into) leaves no outcome, only the status, to say which work it was
                STATE.dropped_works.append(f"{self._kind} at {self._where} (phase "
                                           f"{pending[0].phase})")
            _finish(self._work)
        except Exception:  # noqa: BLE001 - a finalizer must not raise (interpreter shutdown)
            pass

    def adopt(self):
        """The inner work, handed to a batch's handle (batch_isend_irecv): this one is done."""
        self._adopted = True
        return self._work

    def get_future(self):
        """A work turned into a future counts as waited: its waits (fut.wait(),
        torch.futures.wait_all) happen in C++, where no log can see them."""
        self._mark_completed()
        if self._program is STATE.program:
            STATE.program.append(("wait", list(self._indices)))
        return self._work.get_future()

    def __getattr__(self, name):
        return getattr(self._work, name)


def _finish(work) -> None:
    """Keep a dropped work alive for the rest of the rank's run: gloo completes it as the
    peer's half arrives, as NCCL's stream would. Never waited here: a thread waiting on it
    crosses the pair's order of matching, and a wait that gives up closes the pair."""
    _kept.append(work)
