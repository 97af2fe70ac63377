"""The serial shortcut: a rank that computes the whole answer alone, from the public checks'
code (which every student has), instead of communicating.

A rank's own data (its batch, its shard, the tensor it rotates, its initial weights) is drawn
from a key that only it and the checker's parent hold, fresh for every run
(rtp_course/checker/inputs.py): what the other ranks hold can only reach it by communication.
And the checks' own files cannot be loaded again in a confined rank.
"""
import pytest

from rtp_course.checker import engine, report
from test_attacks import hostile, needs_landlock, run

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


KEY_PROBE = """import os as _os
from pathlib import Path as _Path
import torch.distributed as _dist
_run = _Path(_os.environ['HOME']).parent           # the run's directory: the keys were there
for _r in range(_dist.get_world_size()):
    try:
        open(_run / f'key.{_r}', 'rb').read()
    except OSError:
        continue
    raise RuntimeError(f'READ THE KEY OF RANK {_r}')
from rtp_course.checker import inputs as _inputs
try:
    _inputs.seed(0, owner=1 - _dist.get_rank())
except _inputs.NotYourInput:
    pass
else:
    raise RuntimeError('DREW THE OTHER RANK S DATA')
if _inputs._master is not None:
    raise RuntimeError('THE MASTER KEY IS HERE')"""


@needs_landlock
def test_a_rank_holds_no_other_ranks_key(tmp_path):
    """No key file is left to read (a rank deletes its own before the code under test runs,
    and a confined rank cannot open the run's directory), and the rank's key table holds
    only its own sets."""
    impl = hostile(tmp_path, {"comm": [("import torch\n", "import torch\n" + KEY_PROBE + "\n")]})
    results, text = run(impl, world_sizes=(2,))
    assert results and all(r.passed for r in results), text


RELOAD_PROBE = """import importlib.util as _util
from pathlib import Path as _Path
import rtp_course.checker.public.comm as _loaded
_path = _Path(_loaded.__file__)
try:
    _spec = _util.spec_from_file_location('_fresh_checks', _path)
    _mod = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
except OSError:
    pass
else:
    raise RuntimeError('LOADED THE CHECKS AGAIN: ' + repr(_mod.AllReduceCheck().expected(2))[:40])
try:
    open(_path.parent / 'tensor_parallel.py').read()
except OSError:
    pass
else:
    raise RuntimeError('READ A CHECK FILE')"""


@needs_landlock
def test_the_checks_files_cannot_be_loaded_again_in_a_rank(tmp_path):
    """A class loaded afresh from the checks' own file would have its parent side back: the
    confined rank may list the directory but not open a file in it."""
    impl = hostile(tmp_path, {"comm": [("import torch\n", "import torch\n" + RELOAD_PROBE + "\n")]})
    results, text = run(impl, world_sizes=(2,))
    assert results and all(r.passed for r in results), text
