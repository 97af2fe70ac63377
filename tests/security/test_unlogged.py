"""Communication that reaches the wire without passing a logged function: the rank sums
its tensor through a call commlog must see, and shows the log a decoy (a logged all-reduce
of zeros) or a cheaper pattern in its place. Each call must be recorded, so the
communication rule fails and names it (docs/SECURITY.md, "In-process tampering")."""
from hostile import ALL_REDUCE, hostile, run
from rtp_course.checker import engine, report

FUNCOL = "        import torch.distributed._functional_collectives as _fc\n"
GROUP = "        _g = group if group is not None else dist.group.WORLD\n"
DECOY = "        dist.all_reduce(torch.zeros_like(out), group=group)\n"

# funcol's autograd backward of all_reduce, public and callable with any object that holds
# a group's name: it issues torch.ops._c10d_functional.all_reduce itself.
BACKWARD_HELPER = (FUNCOL + GROUP
                   + "        _ctx = __import__('types').SimpleNamespace(group_name=_g.group_name,"
                     " reduce_op='sum')\n"
                     "        out = _fc.wait_tensor(_fc.all_reduce_backward(\n"
                     "            _ctx, x.detach().contiguous().clone())[0]).clone()\n"
                   + DECOY)

# funcol's batch of sends and receives: every rank's tensor, pairwise, point to point.
FUNCOL_BATCH = (FUNCOL + GROUP
                + "        _n, _me = dist.get_world_size(group), dist.get_rank(group)\n"
                  "        out = x.detach().contiguous().clone()\n"
                  "        for _s in range(1, _n):\n"
                  "            _to = dist.get_global_rank(_g, (_me + _s) % _n)\n"
                  "            _fr = dist.get_global_rank(_g, (_me - _s) % _n)\n"
                  "            _got = _fc.batch_p2p_ops_inplace(\n"
                  "                ['isend', 'irecv'], [_to, _fr], [0, 0],\n"
                  "                [x.detach().contiguous().clone(), torch.empty_like(out)],\n"
                  "                _g.group_name)\n"
                  "            out += _fc.wait_tensor(_got[1])\n"
                + DECOY)


def _comm_all_reduce(tmp_path, body):
    results, text = run(hostile(tmp_path, {"comm": [(ALL_REDUCE, body)]}), only=("AllReduce",))
    assert len(results) == 1 and not results[0].passed, text
    return text


def test_funcols_autograd_backward_helper_is_recorded(tmp_path):
    """AllReduce's sum through funcol.all_reduce_backward, a logged all-reduce of zeros shown
    in its place: two all-reduces per call, the helper's named."""
    text = _comm_all_reduce(tmp_path, BACKWARD_HELPER)
    assert "funcol.all_reduce_backward at comm.py" in text, text


def test_funcols_batch_of_sends_and_receives_is_recorded(tmp_path):
    """AllReduce's sum through funcol.batch_p2p_ops_inplace, a logged all-reduce of zeros
    shown in its place: the batch's sends and receives are named."""
    text = _comm_all_reduce(tmp_path, FUNCOL_BATCH)
    assert "funcol.batch_p2p_ops_inplace at comm.py" in text, text


SHARE = '''

def _share(t, group):
    """Rank 0 of the group holds the sum, the others zeros; then the gradient's sum."""
    import types
    import torch.distributed._functional_collectives as fc
    dist.reduce(t, dst=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    if dist.get_rank(group) != 0:
        t.zero_()
    g = group if group is not None else dist.group.WORLD
    ctx = types.SimpleNamespace(group_name=g.group_name, reduce_op="sum")
    t.copy_(fc.wait_tensor(fc.all_reduce_backward(ctx, t)[0]))
'''

# Sent to every rank as an object: while torch pickles it inside all_gather_object (a logged
# call), it all-reduces its tensor, the call made for it by contextlib.
COURIER = '''

class _Courier:
    def __init__(self, t, group):
        self.t, self.group = t, group

    def __getstate__(self):
        import contextlib
        with contextlib.ExitStack() as later:
            later.callback(dist.all_reduce, self.t, group=self.group)
        return {}


def _share(t, group):
    dist.all_gather_object([None] * dist.get_world_size(group), _Courier(t, group), group=group)
'''


def _average_gradients(tmp_path, helper):
    edits = {"data_parallel": [("from torch import nn\n", "from torch import nn\n" + helper),
                               ("            dist.all_reduce(p.grad, group=group)\n",
                                "            _share(p.grad, group)\n")]}
    results = engine.run(["data_parallel"], impl=str(hostile(tmp_path, edits)),
                         world_sizes=[2], only=["average_gradients"], confine=True)
    text = report.text(results)
    assert results and not any(r.passed for r in results), text
    return text


def test_a_reduce_then_funcols_backward_helper_is_two_collectives(tmp_path):
    """average_gradients as a reduce and a sum through funcol.all_reduce_backward (each
    gradient's two collectives, the rule allows one): both recorded."""
    text = _average_gradients(tmp_path, SHARE)
    assert "funcol.all_reduce_backward at data_parallel.py" in text, text


def test_a_call_the_code_under_test_makes_inside_a_logged_call_is_recorded(tmp_path):
    """An all-reduce made by the code under test while torch's all_gather_object pickles its
    object (its __getstate__, through contextlib's callback): recorded, with its line."""
    text = _average_gradients(tmp_path, COURIER)
    assert "all_reduce at data_parallel.py" in text and "in __getstate__" in text, text
