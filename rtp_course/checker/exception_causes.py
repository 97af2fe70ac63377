"""The hint for an exception (or a crash) chosen by what went wrong, not by which check it was.

A check's own hints are written for its usual mistakes; an exception often says more
precisely what happened. SURE causes (an in-place change autograd noticed, a message of
another size than its buffer, mixed dtypes) win over the check's own hints; LIKELY ones
(mismatched shapes, an index past the end, a foreign group) only fill in where the check
has no hint for the phase, since the check knows its usual culprit (a world rank used as
a group rank shows up as an index past the end).
"""
from __future__ import annotations

import re

SURE = [
    (r"Received data size doesn't match expected size|op\.preamble\.length|"
     r"receive buffer holds",
     "a message arrived with another size than the buffer waiting for it: either the ranks' "
     "collectives did not match (every rank must make the same calls, in the same order, "
     "with tensors of the same size), or a receive was allocated with the wrong shape "
     "(allocate it with the shape of what the peer sends; with uneven shards, the shape of "
     "the shard that arrives, not of your own)"),
    (r"collective calls do not match|calls do not match",
     "the ranks' collectives did not match: every rank of a group must make the same "
     "collective calls, in the same order, with tensors of the same shape and dtype (a rank "
     "that skips a call, or makes one more, pairs its next call with another rank's)"),
    (r"already waited",
     "a point-to-point work was waited a second time: gloo can block for ever there (a "
     "laptop's notebook hangs), so wait on each work once and forget it (keep the result for "
     "a second wait())"),
    (r"modified by an inplace operation",
     "a tensor autograd saved for backward was changed in place (an in-place collective such "
     "as all_reduce, or +=, on it): communicate a clone, or a tensor autograd did not save"),
    (r"a leaf Variable that requires grad is being used in an in-place operation",
     "an in-place change of a parameter (a broadcast or copy_ into it) must run under "
     "torch.no_grad()"),
    (r"expected scalar type|must have the same dtype|same dtype|dtype mismatch",
     "tensors of different dtypes met: create buffers and shards in the dtype of the tensors "
     "they meet (the checks run in float64: torch.empty(..., dtype=x.dtype))"),
    (r"made without a device",
     "rule 'Device': create every tensor on the device of the data it meets "
     "(torch.empty(shape, dtype=x.dtype, device=x.device), x.new_empty(shape), "
     "torch.empty_like(x)); the checker treats a tensor made without device= as a GPU run "
     "would: in CPU memory"),
    (r"\[Errno 27\] File too large",
     "a rank may write files of at most 512 MB each (the checker's cap on a rank's disk, "
     "RTP_COURSE_RANK_FILE_MB): code under test has nothing to write to disk"),
    (r"\[Errno 28\] No space left on device",
     "a rank's private directory holds at most 512 MB and 10000 files in all (the checker's "
     "cap on a rank's disk, unless RTP_COURSE_RANK_DISK_MB says otherwise): code under test "
     "has nothing to write to disk"),
    (r"can't allocate memory|Cannot allocate memory|MemoryError",
     "a rank on CPU may use at most 4096 MB of memory (the checker's cap, "
     "RTP_COURSE_RANK_MEMORY_MB): the checks' tensors take a few kilobytes; look for a "
     "tensor whose size grows with a loop, or a copy kept on every step"),
    (r"non-contiguous .* tensor \(at ",
     "rule 'Device': NCCL sends only contiguous memory; a view such as x.t(), x[:, 1:] or "
     "x.narrow(...) is not: hand the collective x.contiguous() (gloo takes the view, so the "
     "checker refuses it on CPU too)"),
    (r"values to unpack \(expected \d+, got 1\)",
     "on NCCL, dist.batch_isend_irecv returns ONE handle for the whole batch (gloo one per "
     "operation; the checker gives one on CPU too): wait on every handle in the list it "
     "returns (for w in works: w.wait()), never unpack or index it"),
    (r"Expected all tensors to be on the same device|No backend type associated with device",
     "a tensor on another device than the others: create tensors on the device of your input "
     "(device=x.device)"),
]
LIKELY = [
    (r"mat1 and mat2 shapes cannot be multiplied|size of tensor a \(\d+\) must match the size "
     r"of tensor b",
     "a product or a sum of mismatched shapes: compare each shard's shape with the docstring "
     "(which dimension is split, which rank holds which slice)"),
    (r"Sizes of tensors must match except in dimension",
     "torch.cat of parts whose other dimensions differ: concatenate along the split "
     "dimension, and give each part the size of its own shard"),
    (r"does not require grad and does not have a grad_fn",
     "the result lost its autograd history: a tensor that was detached (or made under "
     "torch.no_grad()) cannot carry gradients back; return what your autograd.Function "
     "computed from its inputs"),
    (r"backward through the graph a second time",
     "backward ran twice through the same graph: call backward once per forward, or keep "
     "the tensors you need instead of re-running backward"),
    (r"list index out of range|index \d+ is out of bounds",
     "an index past the end: ring positions wrap around, (r + k) % N, and shard indices run "
     "from 0 to N-1"),
    (r"Invalid process group|is not part of|not in (the )?group",
     "a rank used a group it does not belong to: every collective and rank must come from "
     "the `group` you were given"),
]
_TIERS = {"sure": [(re.compile(p), h) for p, h in SURE],
          "likely": [(re.compile(p), h) for p, h in LIKELY]}


def hint_for(text: str, tier: str = "sure") -> str:
    """The hint of the first cause of `tier` whose pattern `text` (an exception's type and
    message, or a crashed process's last words) shows; empty if none."""
    for pattern, hint in _TIERS[tier]:
        if pattern.search(text or ""):
            return hint
    return ""
