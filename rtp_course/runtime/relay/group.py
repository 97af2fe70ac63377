"""A rank's side of the relay: a torch.distributed process group whose operations go to it.

`connect(sock, rank)` takes the rank's end of its socketpair, once per process, and
registers the backend "relay"; `init_process_group("relay", store=HashStore(), ...)` and
every later `new_group` then make `RelayGroup`s. Everything torch.distributed offers on
a process group works through them, as it does on gloo: the c10d functions, their async
handles and futures, batch_isend_irecv, object collectives, the functional collectives
(DTensor, DeviceMesh), torch's own DDP.

Each operation is one frame to the relay (wire.py): its kind, its group (members, and
which of this rank's groups with those members it is: every rank makes its groups in the
same order, so the k-th group of the same members is the same group everywhere), and the
tensors this rank contributes. A receiver thread reads the replies and copies them into
the operation's output tensors before its handle says it is done.

The harness's own synchronisation (`sync`, `flag`, `wait_flags`) and its `mark`s (which
check and phase this rank is in) go over the same link; none of them carries data.
"""
from __future__ import annotations

import collections
import contextlib
import threading
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.futures import Future

from rtp_course.runtime.relay import wire

BACKEND = "relay"
NCCL_RULE = "rule 'Device'"


class RelayError(RuntimeError):
    """An operation the relay refused or the ranks could not complete together."""


class _Request:
    """One posted operation, as the receiver thread sees it: no reference to the caller's
    tensors outlives the moment it is done (a rank that dropped a received buffer must see
    it freed, as the checks' memory rules measure), except for a future asked for."""

    def __init__(self, on_reply):
        self.on_reply = on_reply        # tensors -> None: writes into the outputs (receiver thread)
        self.done = threading.Event()
        self.error: str | None = None
        self.reply: dict = {}
        self.future: Future | None = None
        self.outputs = None             # only for a future's value
        self.lock = threading.Lock()

    def finish(self, error=None):
        with self.lock:
            self.error = error
            future, outputs = self.future, self.outputs
            self.outputs = None
            self.done.set()
        if future is not None:
            _settle(future, error, outputs)

    def get_future(self, outputs) -> Future:
        with self.lock:
            if self.future is None:
                self.future = Future()
                if self.done.is_set():
                    _settle(self.future, self.error, outputs)
                else:
                    self.outputs = outputs
            return self.future


def _settle(future: Future, error, outputs) -> None:
    """The future of a handle: its output tensors, as gloo's futures give them."""
    with contextlib.suppress(RuntimeError):          # already settled
        if error is not None:
            future.set_exception(RelayError(error))
        else:
            future.set_result(list(outputs or []))


class _Link:
    """This process's connection to the relay."""

    def __init__(self, sock, rank: int):
        self.sock, self.rank = sock, rank
        self.write_lock = threading.Lock()
        self.ids = 0
        self.waiting: dict[int, _Request] = {}
        self.gone: str | None = None
        self.group_counts: collections.Counter = collections.Counter()
        threading.Thread(target=self._receive, name="relay-receiver", daemon=True).start()

    def post(self, header: dict, tensors=(), on_reply=None) -> _Request:
        req = _Request(on_reply)
        with self.write_lock:
            self.ids += 1
            rid = self.ids
            header = dict(header, id=rid)
            self.waiting[rid] = req
            if self.gone is None:
                try:
                    wire.send(self.sock, wire.encode(header, tensors))
                except (OSError, ValueError) as e:
                    self.waiting.pop(rid, None)
                    if isinstance(e, ValueError):
                        raise RelayError(str(e)) from None
                    self._lost(f"the relay is gone ({e})")
        if self.gone is not None:
            req.finish(error=self.gone)
        return req

    def tell(self, header: dict) -> None:
        """A frame that wants no reply."""
        with self.write_lock, contextlib.suppress(OSError):
            wire.send(self.sock, wire.encode(header))

    def _lost(self, why: str) -> None:
        self.gone = self.gone or why
        for rid in list(self.waiting):
            req = self.waiting.pop(rid, None)
            if req is not None:
                req.finish(error=self.gone)

    def _receive(self) -> None:
        stream = self.sock.makefile("rb", buffering=1 << 16)     # few system calls a frame
        while True:
            try:
                header, payload = wire.read_frame(stream)
            except (EOFError, OSError, ValueError) as e:
                self._lost(f"the relay is gone ({e})")
                return
            self._deliver(header, payload)

    def _deliver(self, header: dict, payload) -> None:
        """A reply into its request (a function of its own: nothing it touched stays referenced
        while the thread waits for the next frame)."""
        req = self.waiting.pop(header.get("id"), None)
        if req is None:
            return                              # abandoned (a harness wait that timed out)
        req.reply = header
        on_reply, req.on_reply = req.on_reply, None
        error = str(header["error"]) if "error" in header else None
        if error is None and on_reply is not None:
            try:
                on_reply(wire.tensors_of(header, payload))
            except Exception as e:  # noqa: BLE001 - reported by the handle's wait()
                error = f"{type(e).__name__}: {e}"
        del on_reply                            # the outputs, before the caller is woken
        req.finish(error)


_LINK: _Link | None = None


def connect(sock, rank: int) -> None:
    """Take this rank's end of its socketpair and register the backend (once per process)."""
    global _LINK
    _LINK = _Link(sock, rank)
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])
        _every_group_relayed()


def _every_group_relayed() -> None:
    """A group made with backend="gloo" or "nccl" is a relay group too: a rank has no other
    way to its peers (no network, no store), and the relay behaves as gloo does on CPU and
    applies NCCL's rules, so code that names its backend is graded as it runs elsewhere."""
    from torch.distributed import distributed_c10d as c10d
    make = c10d._new_process_group_helper

    def relayed(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs):
        if backend is not None and any(n in str(backend).lower() for n in ("gloo", "nccl")):
            backend = BACKEND
        return make(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs)
    c10d._new_process_group_helper = relayed


def link() -> _Link:
    if _LINK is None:
        raise RuntimeError("this process has no relay (relay.group.connect was not called)")
    return _LINK


class RelayWork(dist.Work):
    """A handle. A point-to-point one behaves as gloo's does on a laptop, where the course's
    notebooks run: it completes only inside wait() (is_completed() stays False until then),
    and a second wait() is refused (gloo can block on it for ever)."""

    def __init__(self, req: _Request, outputs=(), p2p: bool = False):
        super().__init__()
        self._req, self._outputs, self._p2p, self._waited = req, list(outputs), p2p, False

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self._p2p and self._waited:
            raise RelayError("wait() on a point-to-point work already waited: gloo can block "
                             "for ever there; wait on each work once, then forget it")
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) and \
            timeout.total_seconds() > 0 else None
        if not self._req.done.wait(seconds):
            raise RelayError(f"timed out after {seconds:.0f} s waiting for the operation")
        self._waited = True
        if self._req.error is not None:
            raise RelayError(self._req.error)
        return True

    def is_completed(self) -> bool:
        return self._req.done.is_set() and (self._waited or not self._p2p)

    def is_success(self) -> bool:
        return self._req.done.is_set() and self._req.error is None

    def exception(self):
        return RelayError(self._req.error) if self._req.error else None

    def result(self):
        self.wait()
        return list(self._outputs)

    def get_future(self) -> Future:
        return self._req.get_future(self._outputs)

    def synchronize(self):
        pass


def _red(opts) -> str:
    op = opts.reduceOp
    return getattr(op, "op", op).name


def _write(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy what arrived into an output tensor of the caller's (any shape of as many elements)."""
    with torch.no_grad(), torch._C.DisableTorchFunctionSubclass():
        if dst.numel() != src.numel():
            raise RelayError(f"received {src.numel()} elements into a tensor of {dst.numel()}")
        if dst.is_contiguous():
            dst.view(-1).copy_(src.reshape(-1))
        else:
            dst.copy_(src.reshape(dst.shape))


def _flat_chunks(t: torch.Tensor, n: int) -> list[torch.Tensor]:
    """t's elements in n equal consecutive pieces (a *_single / *_into_tensor call's layout)."""
    if t.numel() % n:
        raise RelayError(f"a tensor of {t.numel()} elements does not split into {n} equal parts")
    with torch._C.DisableTorchFunctionSubclass():
        return list(t.detach().contiguous().reshape(n, -1).unbind(0))


def _split(t: torch.Tensor, sizes, n: int) -> list[torch.Tensor]:
    """t along dim 0 in `sizes` rows (equal parts when empty)."""
    with torch._C.DisableTorchFunctionSubclass():
        t = t.detach()
        if not sizes:
            if t.shape[0] % n if t.dim() else True:
                raise RelayError(f"a tensor of {t.shape[0] if t.dim() else 0} rows does not "
                                 f"split into {n} equal parts")
            sizes = [t.shape[0] // n] * n
        if len(sizes) != n or sum(sizes) != t.shape[0]:
            raise RelayError(f"split sizes {list(sizes)} for {t.shape[0]} rows on {n} ranks")
        return list(t.split(list(sizes), 0))


class _BackendFacts:
    """What torch asks of a group's backend, for a device, before it chooses how to call the
    group (torch 2.14's batch_isend_irecv: whether it coalesces; new_group: whether it
    splits). A relay group has no C++ backend: it answers in Python, as gloo would."""
    supports_coalescing = supports_splitting = supports_time_estimate = False

    def name(self):
        return BACKEND


_FACTS = _BackendFacts()


class RelayGroup(dist.ProcessGroup):
    """One process group over the relay (members: global ranks, in group-rank order)."""

    def __init__(self, rank: int, size: int, members: tuple, key: str):
        super().__init__(rank, size)
        self._rank, self._size, self._members, self._key = rank, size, members, key

    @property
    def group_name(self):            # what the functional collectives resolve
        return dist.distributed_c10d._world.pg_names[self]

    def getBackendName(self):
        return BACKEND

    def _get_backend(self, device):
        if torch.device(device).type != "cpu":
            raise RuntimeError(f"No backend type associated with device type {device}")
        return _FACTS

    def size(self):
        return self._size

    def __repr__(self):
        return f"RelayGroup(members={list(self._members)}, rank={self._rank})"

    # the one way out
    def _post(self, op: str, tensors=(), on_reply=None, outputs=None, **extra) -> RelayWork:
        """Send this rank's part; the handle's result (and future) are `outputs` (default: the
        tensors sent, for the in-place collectives)."""
        header = {"op": op, "g": self._key, "m": list(self._members), **extra}
        return RelayWork(link().post(header, list(tensors), on_reply),
                         tensors if outputs is None else outputs, p2p=op in ("send", "recv"))

    def _global(self, group_rank: int) -> int:
        if not 0 <= group_rank < self._size:
            raise ValueError(f"rank {group_rank} is not a rank of this group of {self._size}")
        return self._members[group_rank]

    # reductions
    def allreduce(self, tensors, opts=None):
        red = _red(opts) if opts is not None else "SUM"

        def done(got):
            for t, g in zip(tensors, got):
                _write(t, g)
        return self._post("all_reduce", tensors, done, red=red)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts):
        root = opts.rootRank

        def done(got):
            for t, g in zip(tensors, got):
                _write(t, g)
        return self._post("reduce", tensors, done, red=_red(opts), root=root)

    # gathers
    def _gather_lists(self, output_lists, inputs):
        n = self._size

        def done(got):
            for j, outs in enumerate(output_lists):
                for i, t in enumerate(outs):
                    _write(t, got[j * n + i])
        return self._post("all_gather", inputs, done, outputs=output_lists)

    def allgather(self, output_lists, inputs, opts=None):
        return self._gather_lists(output_lists, inputs)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        return self._gather_lists(output_lists, inputs)

    def _gather_flat(self, outputs, inputs):
        n = self._size

        def done(got):
            for j, out in enumerate(outputs):
                _write(out, torch.cat([g.reshape(-1) for g in got[j * n:(j + 1) * n]]))
        return self._post("all_gather", inputs, done, outputs=outputs)

    def all_gather_single(self, output, input, opts=None):
        return self._gather_flat([output], [input])

    def _allgather_base(self, output, input, opts=None):
        return self._gather_flat([output], [input])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._gather_flat(outputs, inputs)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._gather_flat(outputs, inputs)

    def gather(self, output_lists, inputs, opts):
        root = opts.rootRank

        def done(got):
            if self._rank == root:
                for i, t in enumerate(output_lists[0]):
                    _write(t, got[i])
        return self._post("gather", inputs, done, outputs=output_lists, root=root)

    # scatters
    def _reduce_scatter(self, outputs, pieces_per_output, opts):
        pieces = [p for ps in pieces_per_output for p in ps]

        def done(got):
            for t, g in zip(outputs, got):
                _write(t, g)
        return self._post("reduce_scatter", pieces, done, outputs=outputs,
                          red=_red(opts) if opts is not None else "SUM")

    def reduce_scatter(self, outputs, input_lists, opts=None):
        return self._reduce_scatter(outputs, input_lists, opts)

    def _reduce_scatter_flat(self, outputs, inputs, opts):
        return self._reduce_scatter(outputs, [_flat_chunks(x, self._size) for x in inputs], opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_flat([output], [input], opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._reduce_scatter_flat([output], [input], opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._reduce_scatter_flat(outputs, inputs, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._reduce_scatter_flat(outputs, inputs, opts)

    def broadcast(self, tensors, opts):
        root = opts.rootRank
        mine = self._rank == root

        def done(got):
            if not mine:
                for t, g in zip(tensors, got):
                    _write(t, g)
        return self._post("broadcast", tensors if mine else (), done, outputs=tensors, root=root,
                          want=[] if mine else [wire.spec(t) for t in tensors])

    def scatter(self, outputs, input_lists, opts):
        root = opts.rootRank
        mine = self._rank == root

        def done(got):
            _write(outputs[0], got[0])
        return self._post("scatter", input_lists[0] if mine else (), done, outputs=outputs,
                          root=root,
                          want=[wire.spec(outputs[0])])

    def alltoall(self, outputs, inputs, opts=None):
        def done(got):
            for t, g in zip(outputs, got):
                _write(t, g)
        return self._post("all_to_all", inputs, done, outputs=outputs,
                          want=[wire.spec(t) for t in outputs])

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        n = self._size
        sends = _split(input, input_split_sizes, n)
        slots = _split(torch.empty(output.shape, dtype=output.dtype, device="meta"),
                       output_split_sizes, n)

        def done(got):
            _write(output, torch.cat([g.reshape(-1) for g in got]))
        return self._post("all_to_all", sends, done, outputs=[output],
                          want=[[wire.dtype_name(output), list(s.shape)] for s in slots])

    def barrier(self, opts=None):
        return self._post("barrier", outputs=[])

    # point-to-point (dst / src: ranks of this group)
    def send(self, tensors, dst, tag=0):
        if len(tensors) != 1:
            raise RelayError("send takes one tensor")
        return self._post("send", tensors, peer=self._global(dst))

    def recv(self, tensors, src, tag=0):
        if len(tensors) != 1:
            raise RelayError("recv takes one tensor")

        def done(got):
            _write(tensors[0], got[0])
        return self._post("recv", (), done, outputs=tensors, peer=self._global(src),
                          want=[wire.spec(tensors[0])])

    def recv_anysource(self, tensors, tag=0):
        raise RelayError(f"a receive from any source (src=None): {NCCL_RULE} (NCCL has no "
                         f"such receive; name the rank it comes from)")


def _create(opts, backend_options=None):
    """The backend's constructor (torch calls it on every member of a new group)."""
    members = tuple(opts.global_ranks_in_group) or tuple(range(opts.group_size))
    lk = link()
    lk.group_counts[members] += 1
    key = f"{','.join(map(str, members))}#{lk.group_counts[members]}"
    return RelayGroup(opts.group_rank, opts.group_size, members, key)


# --- the harness's synchronisation: no data crosses ---

def mark(check, phase: str = "") -> None:
    """Tell the relay which check (and phase) this rank is in: its account is kept by it."""
    link().tell({"op": "mark", "check": check, "phase": phase})


def sync(name: str, timeout: float | None = None) -> bool:
    """Wait until every rank of the launch has reached `name`; False after `timeout` s."""
    req = link().post({"op": "sync", "name": name})
    if not req.done.wait(timeout):
        return False
    if req.error is not None:
        raise RelayError(req.error)
    return True


def first_other(name: str, text: str) -> int | None:
    """Once every rank has posted its text under `name`: the first rank whose text differs
    from this one's (None: all the same). The texts themselves never reach another rank."""
    req = link().post({"op": "same", "name": name, "text": text[:4096]})
    req.done.wait()
    if req.error is not None:
        raise RelayError(req.error)
    differs = req.reply.get("differs")
    return differs if type(differs) is int else None


def ask_input(request: dict):
    """(reply header, tensors): this rank's own inputs, from the checker's parent (which
    checks that they are this rank's: it knows whose connection this is)."""
    got = []
    req = link().post({**request, "op": "input"}, (), got.extend)
    req.done.wait()
    if req.error is not None:
        raise RelayError(req.error)
    return req.reply, got


def flag() -> None:
    """Say that this rank has reached its flag point of the current check."""
    link().tell({"op": "flag"})


def wait_flags(ranks, timeout: float) -> bool:
    """Whether every rank in `ranks` raised its flag in the current check within `timeout` s."""
    req = link().post({"op": "flags", "ranks": [int(r) for r in ranks]})
    return req.done.wait(timeout) and req.error is None

