"""Forging a verdict from inside a rank: every check object is reachable there, results are
data the parent validates, and a rank's own inputs come from a key only it and the parent
hold (checker/inputs.py). Each submission is the reference with a few hostile lines."""
import pickle

import pytest
import torch

from hostile import ROOT, at_forward, hostile, run
from rtp_course.checker import engine, judging, report
from rtp_course.runtime.launcher import RankFailed, launch

ASK_THE_CHECKS = """import gc as _gc
from rtp_course.checker.registry import Check as _Check
_checks = [o for o in _gc.get_objects() if isinstance(o, _Check)]
if not any(c.hidden for c in _checks):
    raise RuntimeError('FOUND NO HIDDEN CHECK')
for _c in _checks:
    for _name in ('expected', 'comm_rules'):
        try:
            getattr(_c, _name)(2)
        except RuntimeError as _e:
            if 'parent process only' not in str(_e):
                raise
        else:
            raise RuntimeError('ANSWERED ' + _c.id + '.' + _name)
_left = [f for f in _gc.get_objects() if type(f).__name__ == 'function'
         and f.__code__.co_name in ('expected', 'comm_rules')
         and 'hidden' in f.__code__.co_filename]
if _left:
    raise RuntimeError('KEPT ' + repr(_left))"""


def test_a_check_object_found_in_the_worker_does_not_give_its_answer(tmp_path):
    """Every check object is reachable from code under test (gc); none computes expected values
    or rules there, and no function of a hidden check's parent side is left in memory."""
    results, text = run(hostile(tmp_path, at_forward(ASK_THE_CHECKS)),
                        only=("Duplication", "Duplication_float32"), hidden=True)
    assert len(results) == 2 and all(r.passed for r in results), text


FORGE = """import sys as _sys
from rtp_course.checker import worker as _worker
_record = _worker.Ctx.record
def _forged(ctx, key, tensor):
    check = _sys._getframe(1).f_locals['self']          # the check whose run() records
    try:
        tensor = check.expected(ctx.world_size)[ctx.rank][key]
    except Exception:
        pass
    _record(ctx, key, tensor)
_worker.Ctx.record = _forged"""


def test_records_forged_with_the_checks_own_answer_still_fail(tmp_path):
    """Duplication's backward forgets its all-reduce, and the submission replaces every record
    by the check's answer: there is no answer to take, so the bug fails as it should, and the
    replaced Ctx.record is flagged (confinement/integrity.py)."""
    from rtp_course.confinement.integrity import MARK
    impl = hostile(tmp_path, {"comm": [("import torch\n", "import torch\n" + FORGE + "\n"),
                                        ("        dist.all_reduce(grad, group=ctx.group)\n", "")]})
    results, text = run(impl, only=("Duplication", "Duplication_float32"), hidden=True)
    assert len(results) == 2 and not any(r.passed for r in results), text
    assert all(MARK in r.message and "Ctx.record" in r.message for r in results), text


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_pickle_in_a_result_file_is_not_executed(tmp_path):
    from attack_targets import Bomb  # noqa: F401 (pickled by name)
    marker = tmp_path / "pwned"
    path = tmp_path / "result.comm.Duplication.0.pt"
    path.write_bytes(pickle.dumps({"status": "ok", "records": Bomb(marker)}))
    outcome = judging.load_outcome(path, 0)
    assert outcome.status == "error" and "not a result the checker can judge" in outcome.message
    torch.save({"status": "ok", "records": Bomb(marker)}, path)
    assert judging.load_outcome(path, 0).status == "error"
    assert not marker.exists()


def test_a_launched_function_cannot_return_code(tmp_path):
    import attack_targets
    marker = tmp_path / "pwned"
    with pytest.raises(RankFailed, match="could not be read as plain data"):
        launch(attack_targets.return_bomb, 1, args=(str(marker),), timeout=60)
    assert not marker.exists()


def test_the_checkers_ranks_return_values_are_never_unpickled(tmp_path, monkeypatch):
    """A rank's launcher result file is one of its inherited descriptors: a pickle that builds
    gigabytes of objects written there took the grader minutes and gigabytes to load. The
    checker's ranks return through their outcome files only; the launcher reads nothing else
    of theirs (launch(results="none"))."""
    from rtp_course.checker import group
    from rtp_course.runtime import launcher
    asked = []

    def watched(*args, **kwargs):
        asked.append(kwargs.get("results", "data"))
        return launcher.launch(*args, **kwargs)
    monkeypatch.setattr(group, "launch", watched)
    results, text = run(ROOT / "solutions", only=("Duplication",))
    assert results and all(r.passed for r in results), text
    assert asked == ["none"], asked
    import attack_targets
    assert launcher.launch(attack_targets.return_bomb, 1, args=(str(tmp_path / "pwned"),),
                           timeout=60, results="none") == [None]
    assert not (tmp_path / "pwned").exists()


def test_a_sparse_result_is_a_failed_check_not_a_crash_of_the_grader(tmp_path):
    edits = {"rotation": [("    return rotate_async(tensor, direction, group, recv_shape, recv_dtype).wait()",
                           "    return rotate_async(tensor, direction, group, recv_shape, recv_dtype)"
                           ".wait().to_sparse()")]}
    results = engine.run(["rotation"], impl=str(hostile(tmp_path, edits)), world_sizes=(2,),
                         only=["rotate"])
    text = report.text(results)
    assert not results[0].passed and "MalformedResult" in text, text
    assert "is a torch.sparse_coo tensor, not a dense one" in text, text


def test_torch_raising_not_implemented_is_an_error_not_a_todo(tmp_path):
    """A NotImplementedError that torch raises is no stub's 'not implemented yet'."""
    results, text = run(hostile(tmp_path, at_forward("torch.nn.Module()(x)")),
                        only=("Duplication",))
    assert results[0].status == "error" and "NotImplementedError" in text, text
    assert "not implemented yet" not in text, text


ALL_REDUCE = "        dist.all_reduce(out, group=group)\n        return out\n"

# Each: (exercise, checks, edits of the reference): the answer computed serially on the rank
# from the public checks' own input functions, with no communication.
SHORTCUTS = {
    "AllReduce sums every rank's input itself": ("comm", ["AllReduce"], {"comm": [(
        ALL_REDUCE,
        "        from rtp_course.checker.public.comm import x_rank\n"
        "        return sum(x_rank(q) for q in range(dist.get_world_size(group)))"
        ".to(out.dtype)\n")]}),
    "average_gradients recomputes the whole batch's gradient": (
        "data_parallel", ["average_gradients"], {"data_parallel": [(
            "    world = dist.get_world_size(group)\n",
            "    world = dist.get_world_size(group)\n"
            "    import torch.nn.functional as F\n"
            "    from rtp_course.checker.public import data_parallel as pub\n"
            "    step = 0  # the serial answer of the first step: the whole batch, every rank's\n"
            "    x, y = pub.batch(step, range(world))\n"
            "    model.zero_grad()\n"
            "    F.mse_loss(model(x.to(next(model.parameters()).dtype)),\n"
            "               y.to(next(model.parameters()).dtype)).backward()\n"
            "    return\n")]}),
    "rotate returns the previous rank's tensor without a transfer": (
        "rotation", ["rotate"], {"rotation": [(
            "    return rotate_async(tensor, direction, group, recv_shape, recv_dtype).wait()\n",
            "    from rtp_course.checker.public.rotation import source, value\n"
            "    src = source(dist.get_rank(group), dist.get_world_size(group), direction)\n"
            "    return value(src).to(tensor.dtype)\n")]}),
}


@pytest.mark.parametrize("shortcut", list(SHORTCUTS))
def test_the_serial_answer_cannot_be_computed_on_one_rank(tmp_path, shortcut):
    exercise, only, edits = SHORTCUTS[shortcut]
    impl = hostile(tmp_path, edits)
    results = engine.run([exercise], impl=str(impl), world_sizes=[2, 3], only=only)
    text = report.text(results)
    assert results and not any(r.passed for r in results), text
    assert "input data, which is drawn from a key only they and the checker hold" in text, text


INPUTS_PROBE = """import torch.distributed as _dist
from rtp_course.checker import inputs as _inputs
try:
    _inputs.seed(0, owner=1 - _dist.get_rank())
except _inputs.NotYourInput:
    pass
else:
    raise RuntimeError('DREW THE OTHER RANK S DATA')
try:
    _inputs.owner_key(1 - _dist.get_rank())
except _inputs.NotYourInput:
    pass
else:
    raise RuntimeError('HOLDS THE OTHER RANK S KEY')
if _inputs._master is not None:
    raise RuntimeError('THE MASTER KEY IS HERE')"""


def test_a_rank_holds_no_other_ranks_key(tmp_path):
    """The rank's key table holds only its own sets, and the master key never leaves the
    parent: another rank's data can only arrive by communication."""
    impl = hostile(tmp_path, {"comm": [("import torch\n", "import torch\n" + INPUTS_PROBE + "\n")]})
    results, text = run(impl, world_sizes=(2,))
    assert results and all(r.passed for r in results), text


# The recipe: the check's own run() replaced from inside the rank, so that it records
# what the parent expects (here: nothing at all, the simplest form).
REPLACE_THE_CHECK = """import sys as _s
_s.modules['rtp_course.checker.public.comm'].AllReduceCheck.run = lambda self, ctx: None"""

# commlog's record rewritten: the collective the check forbids taken out of it.
REWRITE_THE_RECORD = """import sys as _s, torch.distributed as _d
_d.all_reduce(x.new_zeros(1), group=group)      # a collective Duplication's forward must not make
_s.modules['rtp_course.runtime.commlog'].STATE.events[:] = []"""


@pytest.mark.parametrize("code, where", [(REPLACE_THE_CHECK, "at import"),
                                         (REWRITE_THE_RECORD, "in forward")])
def test_a_rank_that_changes_the_harness_is_flagged(tmp_path, code, where):
    """Not prevented (the code shares its process with the harness): detected, the check
    failed with the mark the instructor's review lists (confinement/integrity.py)."""
    from hostile import at_import
    from rtp_course.confinement.integrity import MARK
    impl = hostile(tmp_path, at_import(code) if where == "at import" else at_forward(code))
    results, text = run(impl, only=("AllReduce",) if where == "at import" else ("Duplication",))
    assert not results[0].passed and MARK in text, text


# The outcome files the worker opened before confinement are the rank's descriptors too.
WRITE_AN_OUTCOME_FIRST = """import os as _o, stat as _st
for _fd in range(3, 1024):
    try:
        _s = _o.fstat(_fd)
    except OSError:
        continue
    if _st.S_ISREG(_s.st_mode) and _s.st_size == 0:
        try:
            _o.write(_fd, b'a forged outcome')
        except OSError:
            pass"""
KEEP_A_DUPLICATE = """import os as _o, stat as _st, builtins as _b
_b._kept = []
for _name in _o.listdir('/proc/self/fd'):
    try:
        if _st.S_ISREG(_o.fstat(int(_name)).st_mode):
            _b._kept.append(_o.dup(int(_name)))
    except OSError:
        pass"""


@pytest.mark.parametrize("code", [WRITE_AN_OUTCOME_FIRST, KEEP_A_DUPLICATE],
                         ids=["written first", "a duplicate kept"])
def test_the_checks_outcome_files_written_by_the_code_are_flagged(tmp_path, code):
    """A forged outcome written through the inherited descriptor before the worker writes
    (the real one then lands at the file's start all the same), or a duplicate of it kept to
    write through afterwards: the check fails with the mark (confinement/result_files.py)."""
    from rtp_course.confinement.integrity import MARK
    results, text = run(hostile(tmp_path, at_forward(code)), only=("Duplication",))
    assert not results[0].passed and MARK in text and "checker's own files" in text, text


def test_the_reference_changes_nothing_of_the_harness(tmp_path):
    """No false alarm: the reference, graded confined, never trips the watch."""
    from rtp_course.confinement.integrity import MARK
    results, text = run(ROOT / "solutions", only=("Duplication", "AllReduce"))
    assert all(r.passed for r in results) and MARK not in text, text


# commlog's switch for the harness's own calls turned on around a forbidden collective.
HIDE_A_CALL = """import sys as _s, torch.distributed as _d
_st = _s.modules['rtp_course.runtime.commlog'].STATE
_st.local.depth = 1
_d.all_reduce(x.new_zeros(1), group=group)      # a collective Duplication's forward must not make
_st.local.depth = 0"""

# The record rewritten and the watch's own memory of it brought in line.
REWRITE_AND_COVER = """import sys as _s, torch.distributed as _d
_st = _s.modules['rtp_course.runtime.commlog'].STATE
_d.all_reduce(x.new_zeros(1), group=group)
del _st.events[-1:], _st.program[-1:]
for _l in (_st.events, _st.program):
    if hasattr(_l, '_appended'):
        _l._appended = list(_l)"""


@pytest.mark.parametrize("code", [HIDE_A_CALL, REWRITE_AND_COVER], ids=["depth", "ledger"])
def test_a_hidden_or_covered_up_collective_is_still_seen(tmp_path, code):
    """The second red team's recipes: the call is logged all the same (the code under test
    made it), or the rewrite is seen (the ledger's memory is not within reach)."""
    results, text = run(hostile(tmp_path, at_forward(code)), only=("Duplication",))
    assert not results[0].passed and ("all_reduce" in text or "HARNESS CHANGED" in text), text


# ---- the watch compares what runs, and the switches the harness set ------------------------

# The watch's comparison given code that finds nothing (the same function object), then a
# rule of NCCL's taken out: a blinded watch would let both pass.
BLIND_THE_WATCH = """import sys as _s
_m = _s.modules
_m['rtp_course.confinement.integrity']._changed.__code__ = (lambda before, now: []).__code__
_m['rtp_course.runtime.nccl.calls'].before = (
    lambda kind, position, keyword, args, kwargs, where: (args, kwargs, None, None))"""

# The watch's own method replaced on its class, then a rule of NCCL's taken out.
REPLACE_THE_WATCHS_END = """import sys as _s
_m = _s.modules
_m['rtp_course.confinement.integrity'].Watch.end = lambda self, outcome: outcome
_m['rtp_course.runtime.nccl.calls'].before = (
    lambda kind, position, keyword, args, kwargs, where: (args, kwargs, None, None))"""

# NCCL's rules switched off through a wrapped function's globals (no import of the harness).
RULES_OFF = """_g = __import__('torch.distributed').distributed.all_reduce.__globals__
_g['STATE'].nccl_rules = False"""

# The code under test's files taken out of commlog's sight and the depth switch turned on
# around a forbidden collective, then both put back before the check ends.
SWITCH_AROUND_A_CALL = """import torch.distributed as _d
_st = _d.all_reduce.__globals__['STATE']
_dirs, _st.code_dirs = _st.code_dirs, ()
_st.local.depth = 1
_d.all_reduce(x.new_zeros(1), group=group)      # a collective Duplication's forward must not make
_st.local.depth = 0
_st.code_dirs = _dirs"""

# torch's DistributedDataParallel given back its own constructor (commlog's wrapper unwrapped).
UNWRAP_DDP = """from torch.nn.parallel import DistributedDataParallel as _DDP
_DDP.__init__ = _DDP.__init__.__wrapped__"""


# A debugger that reads commlog's wrapper's locals during a call (its `fn`, torch's own
# function, called later unlogged), then takes itself off: no name of the harness spelled.
DEBUGGER_IN_A_CALL = """import bdb as _bdb, inspect as _inspect
import torch.distributed as _d
_raw = []
class _Peek(_bdb.Bdb):
    def user_call(self, frame, argument_list):
        _raw.append(_inspect.getargvalues(frame).locals.get('fn'))
    def user_line(self, frame):
        pass
_p = _Peek()
_p.set_trace()
_d.all_reduce(x.new_zeros(1), group=group)
_p.set_continue()"""

# torch's own all_reduce taken from the wrapper's frame in a refused call's traceback (no
# hook), then called behind the wrapper: an extra collective the record would not show.
BEHIND_THE_WRAPPER = """import torch.distributed as _d
_raw = None
try:
    _d.all_reduce('not a tensor', group=group)
except Exception as _e:
    _tb = _e.__traceback__
    while _tb is not None and _raw is None:
        _raw = _tb.tb_frame.f_locals.get('fn')
        _tb = _tb.tb_next
_raw(x.new_zeros(1), group=group)"""

# A profile function left on at the check's end, whatever it calls.
PROFILER_LEFT_ON = """__import__('sys').setprofile(lambda *a: None)"""

# The memory rule's measure made to say nothing (rtp_course.training, reached by dir()).
MEASURE_SAYS_NOTHING = """import rtp_course as _r
_m = getattr(getattr(_r, [n for n in dir(_r) if n.startswith('train')][0]), 'memory')
setattr(_m, [n for n in dir(_m) if n.startswith('kept_')][0], lambda *a, **k: 0)"""

# Tensor.register_hook made a no-op: a check's hook on its own tensor never fires.
HOOKS_OFF = """import torch as _t
_t.Tensor.register_hook = lambda self, hook: None"""

# torch's own new_empty put back around a call, then host placement's again: a receive buffer
# made by x.new_empty(n, device="cpu") in between would not be seen as a host tensor.
PLACEMENT_UNWRAPPED = """import torch as _t, torch.distributed as _d
_own = _t.Tensor.__dict__.get('new_empty')
_t.Tensor.new_empty = getattr(_own, '__rtp_original__', _t.Tensor.new_empty)
_d.all_reduce(x.new_zeros(1), group=group)
if _own is None:
    del _t.Tensor.new_empty
else:
    _t.Tensor.new_empty = _own"""


@pytest.mark.parametrize("code", [BLIND_THE_WATCH, RULES_OFF, SWITCH_AROUND_A_CALL,
                                  UNWRAP_DDP, REPLACE_THE_WATCHS_END, DEBUGGER_IN_A_CALL,
                                  PROFILER_LEFT_ON, BEHIND_THE_WRAPPER, MEASURE_SAYS_NOTHING,
                                  HOOKS_OFF, PLACEMENT_UNWRAPPED],
                         ids=["watch-code-swapped", "nccl-rules-off", "switch-around-a-call",
                              "ddp-unwrapped", "watch-end-replaced", "debugger-in-a-call",
                              "profiler-left-on", "behind-the-wrapper", "measure-says-nothing",
                              "tensor-hooks-off", "placement-unwrapped"])
def test_what_the_harness_runs_and_its_switches_are_watched(tmp_path, code):
    from rtp_course.confinement.integrity import MARK
    results, text = run(hostile(tmp_path, at_forward(code)), only=("Duplication",))
    assert not results[0].passed and MARK in text, text


# The module table reached without spelling its name, and searched for the hidden checks.
WALK_THE_MODULE_TABLE = """_s = __import__('sys')
_table = getattr(_s, [n for n in dir(_s) if n.endswith('dules')][0])
_found = [n for n in list(_table) if 'hidden' in n]
raise RuntimeError(f'FOUND {_found!r}')"""


def test_the_hidden_checks_are_not_in_the_module_table(tmp_path):
    """The hidden checks run in the rank, so their classes are in its memory; they are not
    in the module table, nor their docstrings anywhere."""
    results, text = run(hostile(tmp_path, at_forward(WALK_THE_MODULE_TABLE)),
                        only=("Duplication",), hidden=True)
    assert "FOUND []" in text, text


# E2's Duplication.forward all-reduces through the process group's own method, below
# torch.distributed's functions: recorded as the all-reduce it is, which forward must not make.
OWN_METHOD = """(group if group is not None else __import__('torch.distributed').distributed.group.WORLD
 ).allreduce([x.detach().clone()]).wait()"""


_PG = "(group if group is not None else __import__('torch.distributed').distributed.group.WORLD)"
_FLAT = "x.detach().flatten().clone()"
_WS = "__import__('torch.distributed').distributed.get_world_size(group)"
OWN_METHODS = {
    "allreduce": OWN_METHOD,
    "all_gather_single": f"{_PG}.all_gather_single({_FLAT}.repeat({_WS}), {_FLAT}).wait()",
    "reduce_scatter_single": f"{_PG}.reduce_scatter_single({_FLAT}, {_FLAT}.repeat({_WS})).wait()",
    "all_to_all_single": f"{_PG}.all_to_all_single({_FLAT}.repeat({_WS}), {_FLAT}.repeat({_WS}), "
                         f"[], []).wait()",
    "monitored_barrier": f"{_PG}.monitored_barrier()",
}


@pytest.mark.parametrize("name", OWN_METHODS)
def test_a_process_groups_own_method_is_recorded(tmp_path, name):
    results, text = run(hostile(tmp_path, at_forward(OWN_METHODS[name])), only=("Duplication",))
    assert not results[0].passed and f"ProcessGroup.{name}" in text, text


def test_a_process_groups_receive_from_any_source_is_refused_as_nccl_would(tmp_path):
    """NCCL has no receive from any source: the process group's own method is held to that
    rule as dist.recv(src=None) is, and its tag is not taken for a peer."""
    code = f"{_PG}.recv_anysource([x.detach().clone()], 1).wait()"
    results, text = run(hostile(tmp_path, at_forward(code)), only=("Duplication",))
    assert not results[0].passed and "NCCL has no receive from any source" in text, text
    assert "ProcessGroup.recv_anysource" in text, text


# The same method called through a trampoline: a thread's target, whose caller is threading.py.
THROUGH_A_THREAD = f"""__import__('threading').Thread(target={_PG}.allreduce,
    args=([x.detach().clone()],)).start()"""


def test_a_process_groups_own_method_called_through_a_thread_is_recorded(tmp_path):
    results, text = run(hostile(tmp_path, at_forward(THROUGH_A_THREAD)), only=("Duplication",))
    assert not results[0].passed and "ProcessGroup.allreduce" in text, text


# A gradient that is a view (NCCL sends no view), returned as a subclass that says it is
# contiguous; and a pipeline's loss, still attached to its graph, that says it is not.
LYING_SLICE = {"comm": [(
    "        return grad.narrow(ctx.dim, ctx.rank * ctx.size, ctx.size).contiguous(), None, None",
    "        class _Slice(torch.Tensor):\n"
    "            def is_contiguous(self, *a, **k):\n"
    "                return True\n"
    "        return grad.narrow(ctx.dim, ctx.rank * ctx.size, ctx.size).as_subclass(_Slice), None, None")]}


def test_a_tensor_that_lies_about_itself_is_judged_by_torch(tmp_path):
    """A red team's: AllGather's backward returned a view whose subclass said it was
    contiguous, and the check asked the object: 15/15 where the honest view earns 11. The
    check asks torch (runtime/asked.py)."""
    results, text = run(hostile(tmp_path, LYING_SLICE), only=("AllGather",))
    assert not results[0].passed and "contiguous" in text, text


# The launch's store found by a dir() walk, then filled: its server is no rank, so the
# ranks' 4 GB cap did not bound it (a red team's reached 4.1 GB).
FILL_THE_STORE = """import torch.distributed as _d
_inner = getattr(_d, [n for n in dir(_d) if n.startswith('distributed_c1')][0])
_store = getattr(_inner, [n for n in dir(_inner) if n.startswith('_get_default_st')][0])()
if _d.get_rank() == 0:
    for _i in range(80):
        _store.set(f'note/{_i}', bytes(4 << 20))
    if len(_store.get('note/0')) == 4 << 20:
        raise RuntimeError('STORED 320 MB')"""


def test_the_launchs_store_holds_a_bounded_amount(tmp_path):
    results, text = run(hostile(tmp_path, at_forward(FILL_THE_STORE)), only=("Duplication",))
    assert not results[0].passed and "STORED" not in text, text
