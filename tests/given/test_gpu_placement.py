"""The checker's rule 'Device' on CPU (rtp_course/runtime/gpu_placement.py): tensors that the
code under test makes without a device are refused where a GPU run would refuse them, and
everything CUDA accepts still runs."""
import copy
import importlib.util
import sys
import textwrap

import pytest
import torch
from torch import nn

from rtp_course.runtime.gpu_placement import HostTensorError, host_placement, made_at, refuse_host_tensors

STUDENT = '''
import torch
from torch import nn


def zeros(n):                      return torch.zeros(n, dtype=torch.float64)
def zeros_like_on(x, n):           return torch.zeros(n, dtype=x.dtype, device=x.device)
def zeros_on_cpu(n):               return torch.zeros(n, dtype=torch.float64, device="cpu")
def scalar(v):                     return torch.tensor(v, dtype=torch.float64)
def arange(n):                     return torch.arange(n)
def linear(i, o):                  return nn.Linear(i, o, dtype=torch.float64)
def param(n):                      return nn.Parameter(torch.zeros(n, dtype=torch.float64))
def tensor_of(xs):                 return torch.tensor(xs)

def new_empty_on_cpu(x, n):        return x.new_empty(n, device="cpu")
def new_zeros(t, n):               return t.new_zeros(n)
def new_zeros_on(t, x, n):         return t.new_zeros(n, device=x.device)
def empty_like_on_cpu(x):          return torch.empty_like(x, device="cpu")
def zeros_like(x):                 return torch.zeros_like(x)
def on_cpu_object(n):              return torch.zeros(n, device=torch.device("cpu"))
def on_named_device(x, n):         return torch.zeros(n, device=str(x.device))
def on_device_type(x, n):          return torch.zeros(n, device=x.device.type)
def on_formatted_device(x, n):     return torch.zeros(n, device=f"{x.device}")
def moved_to_named(t, x):          return t.to(str(x.device))
def moved_to_cpu_object(t):        return t.to(torch.device("cpu"))
def on_available(n):               return torch.zeros(n, device="cuda" if torch.cuda.is_available() else "cpu")


def on_cpu_two_lines(x, n):
    return torch.zeros(n, dtype=x.dtype,
                       device="cpu")


def named_device_beside_a_cpu_word(x, n):
    return torch.zeros(n, device=str(x.device)) if x.device.type != "cpu" or n else None


def in_context(x, n, device):
    with torch.device(device(x)):
        return torch.zeros(n)


def in_cpu_context(n):
    with torch.device("cpu"):
        return torch.zeros(n)
'''


@pytest.fixture
def student(tmp_path):
    path = tmp_path / "student_code.py"
    path.write_text(textwrap.dedent(STUDENT))
    spec = importlib.util.spec_from_file_location("student_code", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with host_placement([str(tmp_path)]):
        yield module
    sys.modules.pop("student_code", None)


def dev(*shape):
    """A tensor the harness put on the device (made outside the code under test)."""
    return torch.randn(*shape, dtype=torch.float64)


def test_what_the_code_under_test_makes_without_a_device_is_host(student):
    assert made_at(student.zeros(3)) is not None
    assert "student_code.py" in made_at(student.zeros(3))
    assert made_at(student.zeros_on_cpu(3)) is not None
    assert made_at(student.zeros_like_on(dev(2), 3)) is None
    assert made_at(dev(3)) is None                       # the harness's own tensors stay plain
    assert made_at(student.linear(2, 3).weight) is not None
    assert made_at(student.param(3)) is not None


def test_new_and_like_factories_given_the_cpu_make_host_tensors(student):
    """Tensor.new_* and torch.*_like follow their input's device unless given device="cpu"."""
    x = dev(3)
    assert "in new_empty_on_cpu" in made_at(student.new_empty_on_cpu(x, 2))
    assert made_at(student.empty_like_on_cpu(x)) is not None
    assert made_at(student.new_zeros_on(x, x, 2)) is None
    assert made_at(student.zeros_like(x)) is None
    host = student.zeros(3)
    assert made_at(student.zeros_like(host)) is not None       # a host tensor's: host
    assert made_at(student.new_zeros(host, 2)) is not None
    assert made_at(student.new_zeros_on(host, x, 2)) is None    # host.new_zeros(device=x.device)
    with pytest.raises(HostTensorError, match=r"irecv was given .*\(at student_code.py:\d+ "
                                              r"in new_empty_on_cpu\)"):
        refuse_host_tensors("irecv", (student.new_empty_on_cpu(x, 3),), {})


def test_the_cpu_is_the_host_where_the_call_writes_it(student):
    """A device "cpu" is the host where the code under test's call says "cpu"; one derived
    from the data (str(x.device), x.device.type) is "cuda:0" on a GPU run: the device."""
    x = dev(3)
    assert made_at(student.on_cpu_object(2)) is not None
    assert made_at(student.on_cpu_two_lines(x, 2)) is not None
    assert made_at(student.moved_to_cpu_object(x)) is not None
    assert made_at(student.in_cpu_context(2)) is not None
    for derived in (student.on_named_device, student.on_device_type,
                    student.on_formatted_device, student.named_device_beside_a_cpu_word):
        assert made_at(derived(x, 2)) is None, derived.__name__
    assert made_at(student.on_available(2)) is None             # "cuda" on a GPU run
    assert made_at(student.moved_to_named(x, x)) is None
    assert made_at(student.moved_to_named(student.zeros(2), x)) is None
    assert made_at(student.in_context(x, 2, lambda t: str(t.device))) is None
    assert (dev(3) + student.on_named_device(x, 3)).shape == (3,)


def test_mixing_a_host_tensor_with_device_tensors_is_refused_with_where_it_was_made(student):
    with pytest.raises(HostTensorError, match=r"mixes a \[3\] float64 tensor made without a device "
                                              r"\(at student_code.py:\d+ in zeros\).*rule 'Device'"):
        dev(3) + student.zeros(3)
    with pytest.raises(HostTensorError, match=r"torch.cat"):
        torch.cat([dev(3), student.zeros(3)])
    with pytest.raises(HostTensorError):
        student.linear(4, 2)(dev(5, 4))                  # CPU weights, GPU input
    with pytest.raises(HostTensorError):
        dev(3).add_(student.zeros(3))
    with pytest.raises(HostTensorError):
        torch.mm(dev(2, 3), student.zeros(3).view(3, 1))
    with pytest.raises(HostTensorError):                 # an output buffer on the host
        torch.mm(dev(2, 3), dev(3, 2), out=student.zeros(4).view(2, 2))


def test_host_only_computation_stays_host_and_is_refused_when_it_meets_the_device(student):
    buf = student.zeros(4) * 2 + 1
    assert made_at(buf) is not None and made_at(buf[1:]) is not None
    with pytest.raises(HostTensorError):
        buf.view(2, 2) @ dev(2, 2)


def test_what_cuda_accepts_still_runs(student):
    x = dev(4)
    assert made_at(x * student.scalar(2.0)) is None          # a CPU scalar in a GPU op
    assert torch.equal(x / student.scalar(2.0), x / 2)
    host = student.zeros(4)
    host.copy_(x)                                            # copies in both directions
    x.copy_(host)
    assert made_at(x) is None
    assert torch.equal(x[student.arange(2)], x[:2])          # host index tensors
    x[student.arange(2)] = 0.0
    assert student.zeros(3).tolist() == [0.0, 0.0, 0.0]      # bookkeeping on the host
    assert student.zeros(3).sum().item() == 0.0
    assert (student.zeros(0) + x[:0]).numel() == 0           # empty tensors never mismatch


def test_moves_follow_a_gpu_run(student):
    x = dev(3)
    moved = student.zeros(3).to(x.device)
    assert made_at(moved) is None
    assert made_at(dev(3) + moved) is None
    assert made_at(student.zeros(3).to(x)) is None
    assert made_at(student.zeros(3).to(torch.float32)) is not None
    layer = student.linear(4, 2).to(x.device)               # built on the host, then moved
    assert made_at(layer.weight) is None
    assert layer(dev(5, 4)).shape == (5, 2)
    assert made_at(student.tensor_of([1.0, 2.0]).to(device=x.device)) is None


def test_a_module_built_on_the_host_and_moved_is_an_ordinary_module_again(student):
    layer = student.linear(4, 2).to(dev(1).device)
    assert type(layer.weight) is nn.Parameter
    assert copy.deepcopy(layer)(dev(5, 4)).shape == (5, 2)
    kept = copy.deepcopy(student.linear(4, 2))               # one still on the host stays there
    assert isinstance(kept.weight, nn.Parameter) and made_at(kept.weight) is not None


def test_gradients_flow_through_host_tensors_moved_to_the_device(student):
    w = student.param(3)
    loss = (w.to(dev(1).device) * dev(3)).sum()
    loss.backward()
    assert w.grad is not None and w.grad.shape == (3,)


def test_collectives_refuse_host_tensors(student):
    with pytest.raises(HostTensorError, match=r"all_reduce was given a \[3\] float64 tensor made "
                                              r"without a device .*NCCL refuses it"):
        refuse_host_tensors("all_reduce", (student.zeros(3),), {})
    with pytest.raises(HostTensorError, match="all_gather was given"):
        refuse_host_tensors("all_gather", ([dev(3), student.zeros(3)], dev(3)), {})
    refuse_host_tensors("all_reduce", (dev(3),), {"group": None})     # device tensors pass


def test_the_factories_are_torchs_own_again_afterwards(tmp_path):
    before = torch.zeros
    new_empty, empty_like = torch.Tensor.new_empty, torch.empty_like
    with host_placement([str(tmp_path)]):
        assert torch.zeros is not before
        assert torch.Tensor.new_empty is not new_empty and torch.empty_like is not empty_like
    assert torch.zeros is before
    assert torch.Tensor.new_empty is new_empty and torch.empty_like is empty_like
