"""What the harness measures of a tensor, it asks torch, not the tensor.

Records (checker/worker.py Ctx.record), the communication log's bytes (runtime/commlog), NCCL's
rules on CPU (runtime/nccl/calls.py) and the memory rule (training/memory.py) all look at
tensors the code under test made. A Tensor subclass, or a tensor whose __class__ the code
reassigned, can answer its own methods as it likes; what holds memory can be a numpy array,
a copy of a received block, or a buffer made when the module was imported. Each test is the
reference with a few hostile lines (the red team's reproductions, rt3 06-09, 11, 14, 04): each
failed as a bug of the code before the harness asked torch (runtime/asked.py) and counted
memory wherever it is."""
import pytest

from hostile import hostile
from rtp_course.checker import engine, report

FW_INIT = ("                shard = self._take(full, *self.shard_ranges(self.rank)[key]).clone()\n")
KEEPS = "                self.__dict__.setdefault('serial_weights', {})[key] = {keep}\n"


def _keeps(keep, at_top=""):
    """flyweight.py of the reference, keeping each full weight as `keep` (code of `full`)."""
    edits = [(FW_INIT, FW_INIT + KEEPS.replace("{keep}", keep))]
    if at_top:
        edits.append(("from . import rotation\n", "from . import rotation\n" + at_top + "\n"))
    return {"flyweight": edits}


def _run(tmp_path, edits, exercise, only, sizes=(2,)):
    results = engine.run([exercise], impl=str(hostile(tmp_path, edits)), world_sizes=list(sizes),
                         only=list(only), hidden=True, confine=False)
    return results, report.text(results)


MEMORY = "bytes held after forward besides activations"

# rt3 08: a Parameter subclass whose untyped_storage() answers with an empty storage.
HIDES_STORAGE = """class _Kept(nn.Parameter):
    def untyped_storage(self):
        return torch.UntypedStorage(0)"""

# rt3 14: room made when the module is imported; the full weights copied into views of it.
IMPORT_POOL = """_ROOM = torch.empty(1 << 22, dtype=torch.uint8)
_USED = [0]


def _keep(full):
    n = full.numel() * full.element_size()
    view = _ROOM[_USED[0]:_USED[0] + n].view(full.dtype).view(full.shape)
    _USED[0] += (n + 15) // 16 * 16
    view.copy_(full.detach())
    return view"""

# the same, room made at the first call and kept in a global: alive before a later check
LAZY_POOL = IMPORT_POOL.replace("_ROOM = torch.empty(1 << 22, dtype=torch.uint8)",
                                "_ROOM = [None]").replace(
    "    n = full.numel()", "    if _ROOM[0] is None:\n"
                           "        _ROOM[0] = torch.empty(1 << 22, dtype=torch.uint8)\n"
                           "    n = full.numel()").replace("_ROOM[_USED", "_ROOM[0][_USED")

KEPT_AS = {
    "a clone (the honest bug)": _keeps("full.detach().clone()"),
    "a Parameter subclass hiding its storage (rt3 08)": _keeps(
        "_Kept(full.detach().clone(), requires_grad=False)", HIDES_STORAGE),
    "views of a buffer made at import (rt3 14)": _keeps("_keep(full)", IMPORT_POOL),
    "a numpy array (rt3 04)": _keeps("full.detach().numpy().copy()"),
    "a numpy array in a closure (rt3 04)": _keeps(
        "(lambda kept: (lambda: kept))(full.detach().numpy().copy())"),
    "a numpy array in a tuple in a dict": _keeps("({0: full.detach().numpy().copy()},)"),
}


@pytest.mark.parametrize("edits", KEPT_AS.values(), ids=KEPT_AS.keys())
def test_a_full_weight_kept_counts_however_it_is_kept(tmp_path, edits):
    results, text = _run(tmp_path, edits, "flyweight", ["TransformerLM"])
    assert results and not results[0].passed and MEMORY in text, text


def test_a_buffer_kept_in_a_global_from_an_earlier_check_counts(tmp_path):
    """Room made at the first call (an earlier check's), kept by the module: alive when the
    next check takes its `before`, counted all the same (memory.code_storages)."""
    results, text = _run(tmp_path, _keeps("_keep(full)", LAZY_POOL), "flyweight",
                         ["Linear", "TransformerLM"])
    lm = [r for r in results if r.check.endswith("TransformerLM")]
    assert lm and not lm[0].passed and MEMORY in text, text


# rt3 07: a non-contiguous view handed to all_gather as a subclass that says it is contiguous.
FLAT = """class _Flat(torch.Tensor):
    def is_contiguous(self, *args, **kwargs):
        return True"""


def test_a_subclass_that_says_it_is_contiguous_is_refused_as_nccl_would(tmp_path):
    edits = {"comm": [("import torch\n", "import torch\n" + FLAT + "\n"),
                      ("        dist.all_gather(parts, x.contiguous(), group=group)\n",
                       "        dist.all_gather(parts, x.as_subclass(_Flat), group=group)\n")]}
    results, text = _run(tmp_path, edits, "comm", ["AllGather_noncontiguous"])
    assert results and not results[0].passed and "NCCLRuleError" in text, text


# rt3 09: rotate receives into the caller's tensor, then swaps its class for one whose
# detach() and untyped_storage() answer with a saved copy of what it was.
REUSED = """class _Reused(torch.Tensor):
    def detach(self):
        return self.before.detach() if "before" in self.__dict__ else super().detach()

    def untyped_storage(self):
        if "before" in self.__dict__:
            return self.before.untyped_storage()
        return super().untyped_storage()"""
RECEIVE = """    sent = tensor.detach().contiguous()  # a copy only if `tensor` was not contiguous
    received = torch.empty(tuple(tensor.shape) if recv_shape is None else tuple(recv_shape),
                           dtype=recv_dtype or tensor.dtype, device=tensor.device)
"""
INTO_CALLERS = """    sent = tensor.detach().clone(memory_format=torch.contiguous_format)
    reuse = recv_shape is None and recv_dtype in (None, tensor.dtype) \\
        and tensor.is_contiguous() and type(tensor) is torch.Tensor
    received = tensor.detach() if reuse else torch.empty(
        tuple(tensor.shape if recv_shape is None else recv_shape),
        dtype=recv_dtype or tensor.dtype, device=tensor.device)
    if reuse:
        tensor.before = sent.clone()
        tensor.__class__ = _Reused
"""


def test_a_tensor_whose_class_was_swapped_is_recorded_as_it_is(tmp_path):
    edits = {"rotation": [("import torch\n", "import torch\n" + REUSED + "\n"),
                          (RECEIVE, INTO_CALLERS)]}
    results, text = _run(tmp_path, edits, "rotation", ["rotate"])
    assert results and not results[0].passed and "input after the call" in text, text


# tests/wrong/context_parallel/keeps_received_blocks, keeping `keep` of each received block
def _keeps_blocks(keep):
    return [("def ring_attention_forward(q, k, v, causal=False, group=None):\n",
             "def ring_attention_forward(q, k, v, causal=False, group=None, keep=None):\n"),
            ("            k, v = incoming[0].wait(), incoming[1].wait()        # the block used "
             "is dropped\n",
             "            k, v = incoming[0].wait(), incoming[1].wait()\n"
             f"            if keep is not None:\n                keep.append({keep})\n"),
            ("        out, lse = ring_attention_forward(q, k, v, causal, group)\n",
             "        ctx.blocks = []\n"
             "        out, lse = ring_attention_forward(q, k, v, causal, group, ctx.blocks)\n")]


# rt3 06: the receive buffer is a subclass whose element_size() is true once (the receive's
# bytes), then 0 (the bytes held); wait() hands back a plain alias of it.
LYING_BUFFER = """class _Buffer(torch.Tensor):
    def element_size(self):
        self.asked = getattr(self, "asked", 0) + 1
        return super().element_size() if self.asked == 1 else 0"""
ROTATION_LIES = [("import torch\n", "import torch\n" + LYING_BUFFER + "\n"),
                 ("        return self._received\n",
                  "        return self._received.as_subclass(torch.Tensor)\n"),
                 ("                           dtype=recv_dtype or tensor.dtype, "
                  "device=tensor.device)\n",
                  "                           dtype=recv_dtype or tensor.dtype, "
                  "device=tensor.device).as_subclass(_Buffer)\n")]

BLOCKS_KEPT = {
    "the received blocks (the honest bug)": ({"context_parallel": _keeps_blocks("(k, v)")},
                                              "received bytes still held after forward"),
    "through a buffer whose element_size() lies (rt3 06)": (
        {"context_parallel": _keeps_blocks("(k, v)"), "rotation": ROTATION_LIES},
        "bytes kept after forward besides its output"),
    "through a lying buffer, counted as received": (
        {"context_parallel": _keeps_blocks("(k, v)"), "rotation": ROTATION_LIES[:1] + [
            ROTATION_LIES[2]]}, "received bytes still held after forward"),
    "as copies (rt3 11)": ({"context_parallel": _keeps_blocks("(k.clone(), v.clone())")},
                           "bytes kept after forward besides its output"),
    "as numpy copies": ({"context_parallel": _keeps_blocks("(k.detach().numpy().copy(), "
                                                           "v.detach().numpy().copy())")},
                        "bytes kept after forward besides its output"),
}


@pytest.mark.parametrize("edits, caught", BLOCKS_KEPT.values(), ids=BLOCKS_KEPT.keys())
def test_received_blocks_kept_for_backward_count_however_they_are_kept(tmp_path, edits, caught):
    results, text = _run(tmp_path, edits, "context_parallel", ["ring_attention_backward"])
    assert results and not results[0].passed and caught in text, text
