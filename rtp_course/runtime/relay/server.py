"""The relay: the only way a checker rank's data reaches another rank, and the account of it.

One thread of the launcher serves one launch: it holds its end of each rank's socketpair
(the rank's end is inherited by that rank alone), reads operations as they come, and

* matches collectives by their order on a group: the k-th collective of every member of a
  group is one operation, which must be the same on every member (kind, sizes, dtypes,
  root, reduce op), else every member gets an error (collectives.py computes both);
* matches point-to-point by order per (group, sender, receiver), as NCCL does (tags
  ignored); a send completes when its receive is there, so a ring of blocking sends
  deadlocks here as on a GPU;
* serves the harness's own synchronisation (`sync`: every rank arrived; `same`: which rank,
  if any, holds another text than this one; `flag`/`flags`: whether given ranks have
  reached a point of a check), which carries no data from rank to rank;
* records every operation in the `Account`: per rank and check, in order, what it sent
  and received, to whom. The harness's `mark` frames say which check (and phase) a rank
  is in: the rank's word, held to the launch's order of checks, so a rank can move its
  traffic only forward, into a check it then fails, never hide it;
* serves each rank's requests for its own inputs (checker.inputs.Provider), in the check
  it is in.

Everything a rank sends is validated as data before it is used (wire.py); a rank that
breaks the protocol loses its connection (and fails), the others go on. What the relay
keeps for a rank is bounded (MAX_HELD bytes posted and not received, MAX_UNREAD sent and
not read, MAX_EVENTS operations, MAX_WAITING open syncs), so no rank can fill the grader's
memory.
"""
from __future__ import annotations

import collections
import contextlib
import fcntl
import itertools
import math
import queue
import selectors
import socket
import struct
import termios
import threading
import time

from rtp_course.runtime.relay import wire
from rtp_course.runtime.relay.collectives import OpError, complete, describe

MAX_HELD = 256 << 20        # bytes a rank may have posted that are not delivered yet
MAX_UNREAD = 256 << 20      # bytes sent to a rank that it has not read yet
MAX_EVENTS = 200_000        # operations a rank may post in a launch (all checks: thousands)
MAX_WAITING = 64            # syncs and flag waits a rank may have open at once
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather",
               "scatter", "all_to_all", "barrier")
P2P = ("send", "recv")
HARNESS = ("sync", "same", "flag", "flags")   # once per check and rank: they carry no data,
                                              # and a rank must not make them a channel


class Account:
    """What each rank sent and received, as the relay saw it: {(rank, check): [event]}, an
    event {"family", "group", "peer", "bytes", "phase"} in the order the rank posted them.
    `bytes` follows the rank-side log's convention: what the rank contributes (for a
    receive, what it received)."""

    def __init__(self):
        self.events: dict = collections.defaultdict(list)
        self.broken: dict = {}             # rank -> why its connection was ended
        self.total: collections.Counter = collections.Counter()   # rank -> operations
        self.notes: dict = {}              # n -> an error's whole text (a rank got "relay note n")
        self.lock = threading.Lock()

    def note(self, text: str) -> str:
        """A reference the ranks may see to `text`, which only the report shows."""
        with self.lock:
            n = len(self.notes) + 1
            self.notes[n] = text
        return f"(relay note {n})"

    def add(self, rank: int, check, event: dict) -> None:
        with self.lock:
            if self.total[rank] >= MAX_EVENTS:
                raise OpError(f"rank {rank} posted more than {MAX_EVENTS} operations")
            self.total[rank] += 1
            self.events[(rank, check)].append(event)

    def of(self, rank: int, check) -> list:
        with self.lock:
            return list(self.events.get((rank, check), ()))


class _Conn:
    def __init__(self, rank: int, sock: socket.socket):
        self.rank, self.sock = rank, sock
        self.inbuf = bytearray()
        self.need = wire.PREFIX.size           # bytes to read before the next step
        self.header_len = self.payload_len = None
        self.header = None
        self.out = collections.deque()         # memoryviews still to write
        self.unread = 0                        # their bytes
        self.check = None                      # the check and phase it says it is in
        self.phase = ""
        self.held = 0                          # bytes posted and not delivered
        self.harness = set()                   # (harness operation, check) it has used
        self.mask = selectors.EVENT_READ       # what the selector watches it for
        self.open = True


class _Posted:
    """One rank's part of an operation: its request id, header and tensors."""

    def __init__(self, conn, header, tensors, nbytes):
        self.conn, self.header, self.tensors, self.nbytes = conn, header, tensors, nbytes
        self.id = header.get("id")


class Relay:
    """`inputs`: what serves the ranks' requests for their own inputs (checker.inputs.Provider:
    `serve(rank, request, check)` -> (header, tensors) or a Future of them; ValueError
    refuses). `checks`: how many checks the launch runs: a rank's marks then name them in
    order (0, 1, ...; never back), and in each it may use each harness operation once."""

    def __init__(self, world_size: int, inputs=None, checks: int | None = None):
        self.world_size, self.inputs, self.checks = world_size, inputs, checks
        self.account = Account()
        self._later = queue.SimpleQueue()      # replies made in other threads (a Future's)
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(world_size)]
        self._rank_ends = [b for _, b in pairs]
        self._conns = [_Conn(r, a) for r, (a, _) in enumerate(pairs)]
        self._sel = selectors.DefaultSelector()
        for c in self._conns:
            c.sock.setblocking(False)
            self._sel.register(c.sock, selectors.EVENT_READ, c)
        self._groups: dict = {}                # group key -> members (global ranks)
        self._seq: dict = collections.defaultdict(int)       # (group, rank) -> collectives posted
        self._pending: dict = {}               # (group, seq) -> {rank: _Posted}
        self._sends: dict = collections.defaultdict(collections.deque)   # (group, src, dst)
        self._recvs: dict = collections.defaultdict(collections.deque)
        self._syncs: dict = collections.defaultdict(dict)   # name -> {rank: _Posted}
        self._flags: set = set()               # (check, rank)
        self._flag_waits: list = []            # (_Posted, check, ranks)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._stop = False
        self._dead: list = []                  # connections found dead while writing to them
        self._pending_out: set = set()         # connections with replies queued this round
        self._thread = threading.Thread(target=self._serve, name="relay", daemon=True)

    # --- the launcher's side ---

    def rank_ends(self) -> list:
        """The ranks' ends of the socketpairs, rank r's at index r (each rank keeps its own)."""
        return self._rank_ends

    def start(self) -> "Relay":
        self._thread.start()
        return self

    def close_rank_ends(self) -> None:
        """Once the ranks hold their ends: the launcher's copies are closed, so that a rank's
        exit is seen as the end of its connection."""
        for s in self._rank_ends:
            with contextlib.suppress(OSError):
                s.close()

    def settle(self, timeout: float = 5.0) -> bool:
        """Read what the ranks have written so far, all of it, before answering: a rank whose
        result file the caller has just read sent every operation that result depends on
        before writing it, so the account then holds them (whatever the rank says of where
        its check ends). False if the relay did not answer in time."""
        done = threading.Event()
        self._later.put(("settle", done))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        return done.wait(timeout)

    def stop(self, drain: float = 2.0) -> None:
        """End the relay, once it has read what the ranks wrote before their connections
        ended (at most `drain` s): their last operations belong to the account."""
        deadline = time.monotonic() + drain
        while any(c.open for c in self._conns) and time.monotonic() < deadline \
                and self._thread.is_alive():
            time.sleep(0.01)
        self._stop = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.ident is not None:       # (started)
            self._thread.join(5)
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.sock.close()
        self.close_rank_ends()
        for s in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()
        self._sel.close()

    # --- the loop ---

    def _serve(self) -> None:
        while not self._stop:
            try:
                ready = self._sel.select(timeout=1.0)
            except (OSError, ValueError):      # the selector closed under a stop
                return
            for key, events in ready:
                conn = key.data
                if conn is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                    self._guarded(None, self._send_later)
                    continue
                self._guarded(conn, self._serve_one, conn, events)
            self._flush_all()

    def _flush_all(self) -> None:
        """Write what this round of the loop queued: the replies to one rank go out together
        (a rotation's send and receive complete at once), in one system call."""
        while self._pending_out:
            conn = self._pending_out.pop()
            if conn.open:
                self._guarded(conn, self._flush, conn)

    def _serve_one(self, conn: _Conn, events: int) -> None:
        if events & selectors.EVENT_READ:
            self._read(conn)
        if events & selectors.EVENT_WRITE and conn.open:
            self._flush(conn)

    def _guarded(self, conn, fn, *args) -> None:
        """fn(*args); what a rank did wrong ends that rank's connection, never the relay. A
        connection found dead while writing to it is ended here too, after the step (ending
        it fails the operations that wait for it, which writes to the others)."""
        try:
            fn(*args)
        except wire.ProtocolError as e:
            self._break(conn, f"it sent the relay something that is not an operation ({e})")
        except (ConnectionError, OSError):
            self._break(conn, "its connection ended")
        except Exception as e:  # noqa: BLE001 - a rank's frames never stop the relay
            self._break(conn, f"the relay could not serve it ({type(e).__name__}: {e})")
        while self._dead:
            dead = self._dead.pop()
            try:
                self._break(dead, "its connection ended")
            except Exception:  # noqa: BLE001 - the relay goes on
                pass

    def _read(self, conn: _Conn, all_of_it: bool = False) -> None:
        """What the rank wrote: a few chunks (then the others are served), or `all_of_it`,
        every byte already waiting when this began (not what it keeps writing after)."""
        waiting = _unread(conn.sock) if all_of_it else None
        for _ in itertools.count() if all_of_it else range(64):
            if waiting is not None and waiting <= 0:
                return
            try:
                chunk = conn.sock.recv(max(conn.need - len(conn.inbuf), 1 << 16))
            except BlockingIOError:
                return
            if waiting is not None:
                waiting -= len(chunk)
            if not chunk:
                self._break(conn, "its connection ended")
                return
            conn.inbuf += chunk
            while len(conn.inbuf) >= conn.need:
                self._step(conn)

    def _step(self, conn: _Conn) -> None:
        if conn.header_len is None:
            conn.header_len, conn.payload_len = wire.PREFIX.unpack_from(conn.inbuf)
            wire.check_prefix(conn.header_len, conn.payload_len)
            del conn.inbuf[:wire.PREFIX.size]
            conn.need = conn.header_len
        elif conn.header is None:
            conn.header = wire.decode_header(bytes(conn.inbuf[:conn.header_len]), conn.payload_len)
            del conn.inbuf[:conn.header_len]
            conn.need = conn.payload_len
        else:
            payload = bytearray(conn.inbuf[:conn.payload_len])
            del conn.inbuf[:conn.payload_len]
            header = conn.header
            conn.header_len = conn.header = None
            conn.need = wire.PREFIX.size
            self._handle(conn, header, wire.tensors_of(header, payload), len(payload))

    def _send(self, conn: _Conn, header: dict, tensors=()) -> None:
        if not conn.open:
            return
        bufs = [memoryview(b).cast("B") for b in wire.encode(header, tensors)]
        conn.unread += sum(b.nbytes for b in bufs)
        if conn.unread > MAX_UNREAD:
            self._break(conn, f"it left more than {MAX_UNREAD >> 20} MB sent to it unread")
            return
        conn.out.extend(bufs)
        self._pending_out.add(conn)            # written at the end of this round (_flush_all)

    def _flush(self, conn: _Conn) -> None:
        """Write what is queued for `conn`, as much as its socket takes now (one system call
        for many buffers: a frame is three)."""
        while conn.out:
            try:
                sent = conn.sock.sendmsg(list(itertools.islice(conn.out, 64)))
            except BlockingIOError:
                break
            except OSError:                    # it is gone: ended after this step (_guarded)
                conn.out.clear()
                self._dead.append(conn)
                return
            conn.unread -= sent
            while conn.out and sent >= conn.out[0].nbytes:
                sent -= conn.out[0].nbytes
                conn.out.popleft()
            if sent:
                conn.out[0] = conn.out[0][sent:]
                break
        mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        if mask != conn.mask:                  # (a system call: only when it changes)
            conn.mask = mask
            with contextlib.suppress(KeyError, ValueError):
                self._sel.modify(conn.sock, mask, conn)

    def _break(self, conn, why: str) -> None:
        if conn is None or not conn.open:
            return
        conn.open = False
        self.account.broken.setdefault(conn.rank, why)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()
        self._fail_waiting_for(conn.rank)

    def _gone(self, rank: int) -> str:
        return (f"rank {rank} ended before this operation completed (its process exited or "
                f"crashed)")

    def _fail_waiting_for(self, rank: int) -> None:
        """Operations that can no longer complete, because `rank` is gone, fail at once (as
        gloo's do when a peer's connection closes): their ranks do not wait for the watchdog."""
        text = self._gone(rank)
        for key in [k for k in self._pending if rank in self._groups.get(k[0], ())]:
            for p in self._pending.pop(key).values():
                self._release(p)
                self._reply_error(p, text)
        for queues in (self._sends, self._recvs):
            for key in [k for k, q in queues.items() if q and rank in (k[1], k[2])]:
                while queues[key]:
                    p = queues[key].popleft()
                    if p.header.get("op") == "send":
                        self._release(p)
                    self._reply_error(p, text)
        for name in list(self._syncs):
            for p in self._syncs.pop(name).values():
                self._reply_error(p, text)
        still = []
        for posted, check, ranks in self._flag_waits:
            if rank in ranks:
                self._reply_error(posted, text)
            else:
                still.append((posted, check, ranks))
        self._flag_waits = still

    def _ended(self, ranks) -> int | None:
        return next((r for r in ranks if not self._conns[r].open), None)

    def _told(self, e: OpError) -> str:
        return str(e) if e.said is None else f"{e.said} {self.account.note(str(e))}"

    def _reply_error(self, posted: _Posted, text: str) -> None:
        self._send(posted.conn, {"id": posted.id, "error": text})

    # --- operations ---

    def _handle(self, conn: _Conn, header: dict, tensors: list, nbytes: int) -> None:
        op = header.get("op")
        posted = _Posted(conn, header, tensors, nbytes)
        if op == "mark":
            check = header.get("check")
            if self.checks is not None and not (
                    type(check) is int and 0 <= check < self.checks
                    and (conn.check is None or check >= conn.check)):
                raise wire.ProtocolError(f"a mark of check {str(check)[:20]} after check "
                                         f"{conn.check}")
            conn.check = check if isinstance(check, (int, str)) and len(str(check)) < 200 else None
            conn.phase = str(header.get("phase", ""))[:200]
            return
        if op in HARNESS and self.checks is not None:
            used = (op, conn.check)
            if used in conn.harness:
                raise wire.ProtocolError(f"a second {op} in check {conn.check}")
            conn.harness.add(used)
        if op == "flag":
            self._flags.add((conn.check, conn.rank))
            self._serve_flag_waits()
            return
        if not isinstance(posted.id, int):
            raise wire.ProtocolError("an operation without a request id")
        want = header.get("want", [])
        if not isinstance(want, list) or len(want) > wire.MAX_TENSORS:
            raise wire.ProtocolError("buffer specs that are not a short list")
        for spec in want:
            _spec_bytes(spec)
        if op in ("sync", "same", "flags") and self._open_waits(conn) >= MAX_WAITING:
            raise wire.ProtocolError(f"more than {MAX_WAITING} syncs open at once")
        if op in ("sync", "same"):
            self._sync(posted)
        elif op == "input":
            self._input(posted)
        elif op == "flags":
            ranks = header.get("ranks")
            if not (isinstance(ranks, list) and all(type(r) is int for r in ranks)):
                raise wire.ProtocolError("flags without ranks")
            self._flag_waits.append((posted, conn.check, ranks))
            self._serve_flag_waits()
        elif op in COLLECTIVES or op in P2P:
            try:
                group, members = self._group(conn, header)
                if op in P2P:
                    self._p2p(posted, op, group, members)
                else:
                    self._collective(posted, op, group, members)
            except OpError as e:
                self._reply_error(posted, self._told(e))
        else:
            raise wire.ProtocolError(f"unknown operation {str(op)[:40]!r}")

    def _group(self, conn: _Conn, header: dict):
        key, members = header.get("g"), header.get("m")
        if not (isinstance(key, str) and len(key) < 200 and isinstance(members, list)
                and members and len(members) <= self.world_size
                and all(type(m) is int and 0 <= m < self.world_size for m in members)
                and len(set(members)) == len(members)):
            raise wire.ProtocolError("an operation without its group")
        if conn.rank not in members:
            raise OpError(f"rank {conn.rank} used a group it is not a member of ({members})")
        known = self._groups.setdefault(key, tuple(members))
        if known != tuple(members):
            raise OpError(f"group {key} has members {list(known)}, not {members}",
                          "a group that another rank made with other members")
        gone = self._ended(known)
        if gone is not None:
            raise OpError(self._gone(gone))
        return key, known

    def _record(self, posted: _Posted, family: str, members, peer=None, nbytes=None) -> None:
        conn = posted.conn
        self.account.add(conn.rank, conn.check, {
            "family": family, "group": list(members), "peer": peer, "phase": conn.phase,
            "bytes": posted.nbytes if nbytes is None else nbytes})

    def _hold(self, posted: _Posted) -> None:
        conn = posted.conn
        if conn.held + posted.nbytes > MAX_HELD:
            raise OpError(f"rank {conn.rank} posted more than {MAX_HELD >> 20} MB that no "
                          f"rank has received yet")
        conn.held += posted.nbytes

    def _release(self, posted: _Posted) -> None:
        posted.conn.held -= posted.nbytes

    # point-to-point

    def _p2p(self, posted: _Posted, op: str, group, members) -> None:
        peer = posted.header.get("peer")
        if type(peer) is not int or peer not in members:
            raise OpError(f"rank {posted.conn.rank}: a {op} to or from rank {peer}, which is not "
                          f"in the group {list(members)}")
        if peer == posted.conn.rank:
            raise OpError(f"rank {peer} posted a {op} to itself")
        me = posted.conn.rank
        if op == "send":
            if len(posted.tensors) != 1:
                raise wire.ProtocolError("a send of other than one tensor")
            self._record(posted, "send", members, peer)
            self._hold(posted)
            self._sends[(group, me, peer)].append(posted)
            self._match(group, me, peer)
        else:
            want = posted.header.get("want")
            if not (isinstance(want, list) and len(want) == 1):
                raise wire.ProtocolError("a receive without its buffer")
            self._record(posted, "recv", members, peer, nbytes=_spec_bytes(want[0]))
            self._recvs[(group, peer, me)].append(posted)
            self._match(group, peer, me)

    def _match(self, group, src: int, dst: int) -> None:
        sends, recvs = self._sends[(group, src, dst)], self._recvs[(group, src, dst)]
        while sends and recvs:
            send, recv = sends.popleft(), recvs.popleft()
            self._release(send)
            data = send.tensors[0]
            want = recv.header["want"][0]
            got = wire.spec(data)
            text = None
            if got[0] != want[0]:
                text = (f"rank {src} sent rank {dst} {got[0]} data, and rank {dst}'s receive "
                        f"buffer is {want[0]}")
            elif math.prod(got[1]) != math.prod(want[1]):
                text = (f"rank {src} sent rank {dst} {math.prod(got[1])} elements "
                        f"({describe(got)}), and rank {dst}'s receive buffer holds "
                        f"{math.prod(want[1])} ({describe(want)})")
            if text is not None:
                said = ("dtype mismatch between a send and its receive" if got[0] != want[0]
                        else "a send and its receive buffer differ in size")
                told = f"{said} {self.account.note(text)}"
                self._send(send.conn, {"id": send.id, "error": told})
                self._send(recv.conn, {"id": recv.id, "error": told})
                continue
            self._send(send.conn, {"id": send.id})
            self._send(recv.conn, {"id": recv.id}, [data])

    # collectives

    def _collective(self, posted: _Posted, op: str, group, members) -> None:
        me = posted.conn.rank
        self._record(posted, op, members, nbytes=_contributed(op, posted))
        self._hold(posted)
        seq = self._seq[(group, me)]
        self._seq[(group, me)] = seq + 1
        parts = self._pending.setdefault((group, seq), {})
        parts[me] = posted
        if len(parts) < len(members):
            return
        del self._pending[(group, seq)]
        ordered = [parts[m] for m in members]
        for p in ordered:
            self._release(p)
        try:
            replies = complete(op, ordered, members)
        except Exception as e:  # noqa: BLE001 - a part that is not what it says: all fail
            text = self._told(e) if isinstance(e, OpError) else \
                f"the ranks' {op} parts could not be combined"
            for p in ordered:
                self._reply_error(p, text)
            return
        for p, tensors in zip(ordered, replies):
            self._send(p.conn, {"id": p.id}, tensors)

    # a rank's own inputs, from the checker's parent (checker.inputs.Provider)

    def _open_waits(self, conn: _Conn) -> int:
        return (sum(conn.rank in arrived for arrived in self._syncs.values())
                + sum(p.conn is conn for p, _, _ in self._flag_waits))

    def _input(self, posted: _Posted) -> None:
        if self.inputs is None:
            self._reply_error(posted, "this launch serves no inputs")
            return
        try:
            got = self.inputs.serve(posted.conn.rank, posted.header, posted.conn.check)
        except ValueError as e:
            self._reply_error(posted, f"input refused: {e}")
            return
        if not hasattr(got, "add_done_callback"):
            self._send(posted.conn, {"id": posted.id, **got[0]}, got[1])
            return

        def done(future, posted=posted):
            try:
                header, tensors = future.result()
                self._later.put((posted, {"id": posted.id, **header}, tensors))
            except Exception as e:  # noqa: BLE001 - refused or failed: the rank is told
                self._later.put((posted, {"id": posted.id, "error": f"input refused: {e}"}, []))
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
        got.add_done_callback(done)

    def _send_later(self) -> None:
        while True:
            try:
                item = self._later.get_nowait()
            except queue.Empty:
                return
            if item[0] == "settle":
                for conn in self._conns:
                    if conn.open:
                        self._guarded(conn, self._read, conn, True)
                item[1].set()
                continue
            posted, header, tensors = item
            self._send(posted.conn, header, tensors)

    # the harness's synchronisation: no data crosses

    def _sync(self, posted: _Posted) -> None:
        gone = self._ended(range(self.world_size))
        if gone is not None:
            self._reply_error(posted, self._gone(gone))
            return
        name = str(posted.header.get("name", ""))[:100]
        arrived = self._syncs[name]
        arrived[posted.conn.rank] = posted
        if len(arrived) == self.world_size:
            del self._syncs[name]
            texts = {r: str(p.header.get("text", ""))[:4096] for r, p in arrived.items()}
            for r, p in arrived.items():
                # "same": only WHICH rank holds another text crosses, never the text itself
                differs = next((q for q in sorted(texts) if texts[q] != texts[r]), None)
                self._send(p.conn, {"id": p.id, "differs": differs})

    def _serve_flag_waits(self) -> None:
        still = []
        for posted, check, ranks in self._flag_waits:
            if all((check, r) in self._flags for r in ranks):
                self._send(posted.conn, {"id": posted.id})
            else:
                still.append((posted, check, ranks))
        self._flag_waits = still


def _unread(sock) -> int:
    """Bytes waiting in `sock` to be read."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


def _spec_bytes(spec) -> int:
    if not (isinstance(spec, list) and len(spec) == 2 and spec[0] in wire.DTYPES
            and isinstance(spec[1], list) and all(type(d) is int and d >= 0 for d in spec[1])):
        raise wire.ProtocolError("a buffer spec that is not one")
    return wire.nbytes_of(spec)


def _contributed(op: str, posted: _Posted) -> int:
    """The bytes the rank-side log counts for this rank's part (see commlog.C10D): its
    tensors, or for a broadcast's receivers and a scatter's members their buffers."""
    if op in ("broadcast", "scatter") and not posted.tensors:
        return sum(_spec_bytes(s) for s in posted.header.get("want", []))
    if op == "scatter":
        return sum(_spec_bytes(s) for s in posted.header.get("want", []))
    return posted.nbytes
