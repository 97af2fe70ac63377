"""A student's words, in one home: every course-wide cause and hint the checker says, by id.

A check's own hints (its `hints`, keyed by the tensor or phase they explain) stay with the
check: they are its words for its usual mistakes. What any check may say lives here: what an
exception's text shows (`tier` "sure": it wins over a check's own hints; "likely": it fills
in where the check has none), why ranks hung or a process ended, what a wrong tensor looks
like it came from. The checker says them with `say(id, **fields)`; `ids_in(report)` finds
which of them a report says, so a test asserts a message's id, not its wording, and a
message is reworded here alone (`tests/unit/test_messages.py` holds the table).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Message:
    id: str
    text: str           # a str.format template: say() fills its {fields}
    shows: str = ""     # an exception's cause: the regex of the exception's text that shows it
    tier: str = ""      # an exception's cause: "sure" or "likely"


def _sure(id: str, shows: str, text: str) -> Message:
    return Message(id, text, shows, "sure")


def _likely(id: str, shows: str, text: str) -> Message:
    return Message(id, text, shows, "likely")


# --- what an exception's text shows, in the order asked: the first whose pattern matches ----

EXCEPTIONS = (
    _sure("exception.harness-changed", r"HARNESS CHANGED",
          "remove the code that changes the checker's objects, torch.distributed or commlog's "
          "record: the check judges what your code computes and communicates, nothing else"),
    _sure("exception.size-differs",
          r"Received data size doesn't match expected size|op\.preamble\.length|"
          r"receive buffer holds",
          "a message arrived with another size than the buffer waiting for it: either the "
          "ranks' collectives did not match (every rank must make the same calls, in the same "
          "order, with tensors of the same size), or a receive was allocated with the wrong "
          "shape or dtype (allocate it with the shape and dtype of what the peer sends: with "
          "uneven shards the shape of the shard that arrives, not of your own, i.e. recv_shape; "
          "recv_dtype when the peer sends another dtype; never the default float32); in an "
          "all-to-all, rank q's output_splits[p] must be rank p's input_splits[q]: exchange "
          "the split sizes first"),
    _sure("exception.calls-differ", r"collective calls do not match|calls do not match",
          "the ranks' collectives did not match: every rank of a group must make the same "
          "collective calls, in the same order, with tensors of the same shape and dtype (a "
          "rank that skips a call, or makes one more, pairs its next call with another rank's)"),
    _sure("exception.saved-changed", r"modified by an inplace operation",
          "a tensor autograd saved for backward was changed in place (an in-place collective "
          "such as all_reduce, or +=, on it; or a buffer a function keeps and writes again at "
          "its next call, which two calls before one backward show): communicate a clone, or a "
          "tensor autograd did not save, and return tensors of each call's own"),
    _sure("exception.graph-freed", r"backward through the graph a second time",
          "a tensor kept from an earlier call (on the module, its class or in a global) carries "
          "that call's graph, which its backward freed: keep nothing of one call for the next; "
          "each call computes from its own inputs and returns tensors of its own"),
    _sure("exception.leaf-in-place",
          r"a leaf Variable that requires grad is being used in an in-place operation",
          "an in-place change of a parameter (a broadcast or copy_ into it) must run under "
          "torch.no_grad()"),
    _sure("exception.dtypes",
          r"expected scalar type|must have the same dtype|same dtype|dtype mismatch",
          "rule 'Dtypes': tensors of different dtypes met: create buffers, shards and helper "
          "tensors (a mask turned into a bias) in the dtype of the tensors they meet "
          "(torch.empty(..., dtype=x.dtype), x.new_zeros(...)); one made in the default "
          "float32 promotes half-precision data to float32"),
    _sure("exception.device", r"made without a device",
          "rule 'Device': create every tensor on the device of the data it meets "
          "(torch.empty(shape, dtype=x.dtype, device=x.device), x.new_empty(shape), "
          "torch.empty_like(x)); the checker treats a tensor made without device= as a GPU run "
          "would: in CPU memory"),
    _sure("exception.file-too-large", r"\[Errno 27\] File too large",
          "a rank may write files of at most 512 MB each (the checker's cap on a rank's disk, "
          "RTP_COURSE_RANK_FILE_MB): code under test has nothing to write to disk"),
    _sure("exception.disk-full", r"\[Errno 28\] No space left on device",
          "a rank's private directory holds at most 512 MB and 10000 files in all (the "
          "checker's cap on a rank's disk, unless RTP_COURSE_RANK_DISK_MB says otherwise): "
          "code under test has nothing to write to disk"),
    _sure("exception.memory", r"can't allocate memory|Cannot allocate memory|MemoryError",
          "a rank on CPU may use at most 4096 MB of memory (the checker's cap, "
          "RTP_COURSE_RANK_MEMORY_MB): the checks' tensors take a few kilobytes; look for a "
          "tensor whose size grows with a loop, or a copy kept on every step"),
    _sure("exception.contiguity", r"non-contiguous .* tensor \(at ",
          "rule 'Contiguity': NCCL sends only contiguous memory; a view such as x.t(), x[:, 1:] "
          "or x.narrow(...) is not: hand the collective x.contiguous() (gloo takes the view, so "
          "the checker refuses it on CPU too)"),
    _sure("exception.cuda-assert",
          r"device-side assert triggered|CUDA error: an illegal memory access",
          "a CUDA kernel failed (on a GPU an index out of range is reported this way, later "
          "than the line that caused it): look for an index past the end in this check's code, "
          "e.g. an embedding lookup of ids outside this rank's rows that was not masked"),
    _sure("exception.recomputed-shape", r"Mismatch in shape: grad_output\[0\] has a shape of",
          "a backward recomputed an output whose shape differs from the gradient it was given: "
          "the recomputation used other tensors than the forward did, either another call's "
          "input (a layer called twice before one backward keeps each call's inputs in its own "
          "autograd context, ctx.save_for_backward, never on the module) or another shard's "
          "shape (receive each shard with its own shape, recv_shape)"),
    _sure("exception.one-handle",
          r"values to unpack \(expected \d+, got 1\)|returned ONE handle for the whole batch",
          "on NCCL, dist.batch_isend_irecv returns ONE handle for the whole batch (gloo one per "
          "operation; the checker gives one on CPU too): wait on every handle in the list it "
          "returns (for w in works: w.wait()), never unpack or index it. rule 'Device': "
          "\"dist.batch_isend_irecv returns ONE handle for the whole batch (wait on every "
          "handle it returns, never unpack them)\""),
    _sure("exception.devices-differ",
          r"Expected all tensors to be on the same device|No backend type associated with device",
          "a tensor on another device than the others: create tensors on the device of your "
          "input (device=x.device)"),
    _likely("exception.shapes",
            r"mat1 and mat2 shapes cannot be multiplied|size of tensor a \(\d+\) must match the "
            r"size of tensor b",
            "a product or a sum of mismatched shapes: compare each shard's shape with the "
            "docstring (which dimension is split, which rank holds which slice)"),
    _likely("exception.cat", r"Sizes of tensors must match except in dimension",
            "torch.cat of parts whose other dimensions differ: concatenate along the split "
            "dimension, and give each part the size of its own shard"),
    _likely("exception.detached", r"does not require grad and does not have a grad_fn",
            "the result lost its autograd history: a tensor that was detached (or made under "
            "torch.no_grad()) cannot carry gradients back; return what your autograd.Function "
            "computed from its inputs"),
    _likely("exception.gradient-shape", r"returned an invalid gradient at index \d+ - got",
            "a backward returned a gradient of another shape than its forward's input: what "
            "backward needs (the dim, the sizes, the rank) must be saved on ctx by the same "
            "call's forward; a function called again before the first call's backward "
            "overwrites what was kept on the class, the module or a global"),
    _likely("exception.backward-twice", r"backward through the graph a second time",
            "backward ran twice through the same graph: call backward once per forward, or "
            "keep the tensors you need instead of re-running backward"),
    _likely("exception.index", r"list index out of range|index \d+ is out of bounds",
            "an index past the end: ring positions wrap around, (r + k) % N, and shard indices "
            "run from 0 to N-1"),
    _likely("exception.not-in-group", r"Invalid process group|is not part of|not in (the )?group",
            "a rank number a call was given is not in the group it was given (a src, a dst, a "
            "peer, or the calling rank itself): a collective's src and a send's peer are GLOBAL "
            "ranks of members of `group` (dist.get_global_rank(group, 0), "
            "dist.get_global_rank(group, peer)), and only members call a group's collectives"),
    Message("exception.fallout",
            "another rank ended while this rank was communicating with it: it failed in its own "
            "call, or made other calls than this rank. Every rank makes the same collective "
            "calls in the same order, with tensors of the same size; a receive allocated with "
            "another shape or dtype than what its peer sends (recv_shape, recv_dtype) aborts "
            "the receiving rank"),
)

# --- why the ranks hung ----------------------------------------------------------------------

HANGS = (
    Message("hang.computing",
            "no rank was inside a communication call: each was blocked somewhere else (a "
            "sleep, a lock, a read of input?). Code under test only computes and communicates"),
    Message("hang.left-out",
            "rank(s) {done} finished this check while the others wait in {calls}: a collective "
            "that the finished ranks never called. Either they skipped it (every rank makes the "
            "same collectives whatever its data: a rank whose tensor or gradient is zero "
            "all-reduces it all the same), or it ran over more ranks than the group (a "
            "collective called without group= runs over the whole world, and ranks outside the "
            "subgroup are waited for forever: pass `group` to every collective)"),
    Message("hang.blocking-sends",
            "every rank is blocked in a blocking dist.send, and no rank has posted a receive: a "
            "send returns only when the peer receives (on gloo and NCCL alike). Post the "
            "receive and the send together (dist.batch_isend_irecv), then wait"),
    Message("hang.both-send-first",
            "rank {r} and rank {peer} are both blocked in a send to each other (rank {r}: "
            "{call}; rank {peer}: {peer_call}), each posting its receive only after its send: "
            "on NCCL a send waits for its receive. Where two neighbours send to each other at "
            "once, at least one of them posts its receive together with its send (one "
            "dist.batch_isend_irecv) or before it"),
    Message("hang.half-missing",
            "rank {r} waits to {verb} rank {peer}, but rank {peer} never posted a {half} {to} "
            "rank {r} in this check ({went}): every transfer needs its other half on the peer. "
            "Check the direction of each peer, and that both the isend and the irecv are "
            "posted"),
    Message("hang.send-dropped",
            "rank {r} waits to receive from rank {peer}, which posted the send but never waited "
            "on its work (and is no longer waiting for it): a send whose work is dropped "
            "unwaited may never be delivered (gloo). wait() on EVERY work you start, the send's "
            "as well as the receive's"),
    Message("hang.fewer-in-phase",
            "rank {r} waits in phase '{phase}' to {verb} rank {peer}, which {where}: in "
            "'{phase}' rank {peer} posted fewer {half}s {to} rank {r} than rank {r} posted "
            "{mine} it. Count each direction's transfers in every part of the call on both "
            "sides: each needs its other half"),
    Message("hang.stuck",
            "every rank must make the same collective calls in the same order; point-to-point "
            "sends need a matching receive on the peer (post them together with "
            "dist.batch_isend_irecv)"),
    Message("hang.import",
            "importing {module}.py did not finish ({why}){where}: an endless loop or a blocking "
            "call at import time? Every check of {module} fails"),
)

# --- why a process ended ---------------------------------------------------------------------

CRASHES = (
    Message("crash.mismatch",
            "a process killed by the communication library usually means the ranks' "
            "collectives did not match (a different order, count or size on some rank); what "
            "the rank printed last is quoted above"),
    Message("crash.disk",
            "code under test has nothing to write to disk: a check's results are a few "
            "tensors, kept in memory"),
    Message("crash.import",
            "code at the top level of a module runs when it is imported: keep it to "
            "definitions, and move work into the functions the checks call"),
    Message("crash.dropped",
            "a work whose handle was let go unwaited still runs (NCCL's stream, gloo's thread) "
            "and writes into its tensors: most likely into memory freed since (a storage "
            "resized to 0, a buffer dropped or reallocated), which crashes the process. Keep "
            "the handle of every transfer you start (a prefetch's too: never overwrite a handle "
            "still in flight) and wait() on it before you free, reuse or return its tensors"),
    Message("crash.exited",
            "code under test must return its result, never end the process (no sys.exit, "
            "os._exit or signals)"),
    Message("crash.segfault",
            "a segmentation fault usually means a tensor used after its memory was freed, or a "
            "wrong-sized buffer given to a communication call"),
    Message("crash.killed", "the process was killed from outside or by the system (out of memory?)"),
)

# --- what a wrong tensor looks like it came from ----------------------------------------------

VALUES = (
    Message("value.dtypes",
            "rule 'Dtypes': keep the dtype of the tensors you are given: a buffer made with "
            "torch.zeros(n) or torch.empty(n) is float32 (the default dtype), and a float32 "
            "helper tensor promotes half-precision data to float32; use x.new_zeros(n), "
            "torch.empty_like(x), or pass dtype=x.dtype"),
    Message("value.float32",
            "its values agree with the expected ones only to float32 precision (about 7 "
            "digits): somewhere on the way they were float32"),
    Message("value.not-finite", "{n} entries are NaN or infinite"),
    Message("value.not-finite-hint",
            "NaN or inf where the serial model has numbers: memory read before it was written "
            "(torch.empty, a receive buffer used before wait()), or a division by zero"),
    Message("value.huge", "some entries are huge next to the expected values"),
    Message("value.huge-hint",
            "values like these are uninitialised memory: a torch.empty buffer (or a receive "
            "buffer) read before anything was written into it; wait() for a receive before "
            "using its tensor"),
    Message("value.zeros", "it is all zeros"),
    Message("value.zeros-hint",
            "all zeros where the serial model has values: was it ever written? (a receive never "
            "waited for, an in-place update of a copy, a gradient never accumulated)"),
    Message("value.scaled", "every entry is {ratio} x the expected value"),
    Message("value.sign", "the sign is flipped"),
    Message("value.world-sum",
            "{n} = the world size: a sum over the ranks where their mean is wanted"),
    Message("value.world-divided", "1/{n}: divided by the world size once too often"),
    Message("value.misplaced", "it holds the right values in the wrong places"),
    Message("value.misplaced-hint",
            "the right numbers in the wrong places: a slice taken with the wrong rank or "
            "offset, blocks concatenated in the wrong order, or the wrong dim"),
)

# --- communication the checker saw -------------------------------------------------------------

COMMUNICATION = (
    Message("comm.dropped",
            "keep the handle of every transfer you start and wait() on it before you use what "
            "it moves, or return: a handle let go unwaited still runs on NCCL (and moves data "
            "nobody asked for), while on gloo its pair can stall the next transfer"),
    Message("comm.tags",
            "NCCL ignores the tag of a send or receive: between two ranks it matches sends and "
            "receives by the order they were posted, nothing else (gloo matches tags too; the "
            "checker does as NCCL). Transfers told apart by tag (k's and v's) swap where one "
            "rank posts them in another order than its peer: post them in the same order on "
            "every rank (k's send and receive before v's), or send both in one buffer"),
    Message("blame.earlier",
            "this may follow from [{task}] {exercise}.{check}, which fails its own check: fix "
            "that first{then}"),
)

MESSAGES = {m.id: m for m in EXCEPTIONS + HANGS + CRASHES + VALUES + COMMUNICATION}


def say(id: str, **fields) -> str:
    """The text of message `id`, its {fields} filled in."""
    return MESSAGES[id].text.format(**fields)


def causes(tier: str) -> tuple[Message, ...]:
    """The exception causes of `tier` ("sure" or "likely"), in the order they are asked."""
    return tuple(m for m in EXCEPTIONS if m.tier == tier)


def _spaced(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@lru_cache(maxsize=None)
def _pattern(id: str) -> re.Pattern:
    """Message `id` as a regex over a report: its fixed words, any text for each field, any
    run of white space for a space, and after a hyphen (a page wraps long lines at both)."""
    parts = re.split(r"\{\w+\}", _spaced(MESSAGES[id].text))
    return re.compile(".+?".join(re.escape(p).replace(r"\ ", r"\s+").replace(r"\-", r"-\s*")
                                 for p in parts), re.S)


def says(id: str, text: str) -> bool:
    """Whether `text` says message `id`."""
    return _pattern(id).search(text) is not None


def ids_in(report: str) -> set[str]:
    """The ids of the messages `report` says."""
    return {id for id in MESSAGES if _pattern(id).search(report)}
