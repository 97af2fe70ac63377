"""Facts about a tensor from torch's own C methods, never from the object's.

Code under test hands the harness its tensors: a receive buffer, a collective's argument, a
result to record, a weight the memory rule counts. Any of them may be a Tensor subclass, or an
object whose __class__ it reassigned, whose Python methods lie: element_size() true once and
0 after, is_contiguous() always True, untyped_storage() an empty storage, detach() another
tensor. Every function here calls torch._C.TensorBase's method unbound, so that no Python
override of the object's type is looked up, with every __torch_function__ off (a subclass's
and a mode's), and tells a tensor by its real type (type(), not isinstance: its __class__
is not asked). A storage is asked through torch._C.StorageBase in the same way."""
from __future__ import annotations

import torch

_T = torch._C.TensorBase
_S = torch._C.StorageBase
_OFF = torch._C.DisableTorchFunction


def is_tensor(t) -> bool:
    """Whether `t` is a tensor by its real type."""
    return issubclass(type(t), _T)


def numel(t) -> int:
    with _OFF():
        return _T.numel(t)


def nbytes(t) -> int:
    """Bytes of the elements of `t` (numel * element size)."""
    with _OFF():
        return _T.numel(t) * _T.element_size(t)


def element_size(t) -> int:
    with _OFF():
        return _T.element_size(t)


def is_contiguous(t, memory_format=torch.contiguous_format) -> bool:
    with _OFF():
        return _T.is_contiguous(t, memory_format=memory_format)


def dtype(t) -> torch.dtype:
    return _T.dtype.__get__(t)


def requires_grad(t) -> bool:
    return _T.requires_grad.__get__(t)


def grad_fn(t):
    return _T.grad_fn.__get__(t)


def dim(t) -> int:
    with _OFF():
        return _T.dim(t)


def shape(t) -> tuple:
    with _OFF():
        return tuple(_T.size(t))


def stride(t) -> tuple:
    with _OFF():
        return tuple(_T.stride(t))


def storage_offset(t) -> int:
    with _OFF():
        return _T.storage_offset(t)


def storage(t):
    """The tensor's untyped storage, as torch has it."""
    with _OFF():
        return _T.untyped_storage(t)


def storage_span(t) -> tuple:
    """(data pointer, bytes) of the whole storage `t` views."""
    with _OFF():
        s = _T.untyped_storage(t)
        return _S.data_ptr(s), _S.nbytes(s)


def storage_object_span(s) -> tuple:
    """(data pointer, bytes) of a torch.UntypedStorage (or the untyped storage of a
    TypedStorage), asked of torch's StorageBase."""
    if issubclass(type(s), torch.TypedStorage):
        s = object.__getattribute__(s, "_untyped_storage")
    return _S.data_ptr(s), _S.nbytes(s)


def detach(t):
    """A plain torch.Tensor sharing `t`'s data, whatever `t`'s class says."""
    with _OFF():
        d = _T.detach(t)
    return d if type(d) is torch.Tensor else _T.as_subclass(d, torch.Tensor)
