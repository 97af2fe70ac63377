"""Every communicating function of torch.distributed, by name: the operation it performs.

tests/test_commlog.py fails when torch gains a communicating function missing here.
"""
from __future__ import annotations

# Every communicating function of torch.distributed a student can call, by name: the
# operation it performs (its family: what a CommRule's kind matches besides the name) and
# the positional index and keyword of what this rank contributes (its bytes; None: unknown,
# e.g. pickled objects). tests/test_commlog.py fails when torch gains one missing here.
C10D = {
    "all_reduce": ("all_reduce", 0, "tensor"), "all_reduce_coalesced": ("all_reduce", 0, "tensors"),
    "broadcast": ("broadcast", 0, "tensor"), "_broadcast_coalesced": ("broadcast", 1, None),
    "broadcast_object_list": ("broadcast", None, None), "reduce": ("reduce", 0, "tensor"),
    "all_gather": ("all_gather", 1, "tensor"),
    "all_gather_into_tensor": ("all_gather", 1, "input_tensor"),
    "all_gather_single": ("all_gather", 1, "input_tensor"),
    "_all_gather_base": ("all_gather", 1, "input_tensor"),
    "all_gather_coalesced": ("all_gather", 1, "input_tensor_list"),
    "all_gather_object": ("all_gather", None, None),
    "reduce_scatter": ("reduce_scatter", 1, "input_list"),
    "reduce_scatter_tensor": ("reduce_scatter", 1, "input"),
    "reduce_scatter_single": ("reduce_scatter", 1, "input"),
    "_reduce_scatter_base": ("reduce_scatter", 1, "input"),
    "gather": ("gather", 0, "tensor"), "gather_object": ("gather", None, None),
    "gather_single": ("gather", 0, "tensor"),                   # torch 2.14
    "gather_into_tensor": ("gather", 0, "tensor"),              # torch 2.14
    "scatter": ("scatter", 0, "tensor"), "scatter_object_list": ("scatter", None, None),
    "all_to_all": ("all_to_all", 1, "input_tensor_list"),
    "all_to_all_single": ("all_to_all", 0, "output"),
    "barrier": ("barrier", None, None), "monitored_barrier": ("barrier", None, None),
    "send": ("send", 0, "tensor"), "isend": ("isend", 0, "tensor"),
    "recv": ("recv", 0, "tensor"), "irecv": ("irecv", 0, "tensor"),
    "send_object_list": ("send", None, None), "recv_object_list": ("recv", None, None),
}
# Functional collectives (torch.distributed._functional_collectives; DTensor and DeviceMesh
# code uses them too), recorded as "funcol.<name>".
FUNCOL = {
    "all_reduce": ("all_reduce", 0), "all_reduce_inplace": ("all_reduce", 0),
    "all_reduce_coalesced": ("all_reduce", 0),
    "all_gather_tensor": ("all_gather", 0), "all_gather_tensor_autograd": ("all_gather", 0),
    "all_gather_single": ("all_gather", 0), "all_gather_single_autograd": ("all_gather", 0),
    "all_gather_single_coalesced": ("all_gather", 0),
    "all_gather_into_tensor_coalesced": ("all_gather", 0),
    "all_gather_inplace": ("all_gather", 1), "all_gather_tensor_inplace": ("all_gather", 1),
    "reduce_scatter_tensor": ("reduce_scatter", 0), "reduce_scatter_tensor_autograd": ("reduce_scatter", 0),
    "reduce_scatter_single": ("reduce_scatter", 0), "reduce_scatter_single_autograd": ("reduce_scatter", 0),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", 0),
    "reduce_scatter_single_coalesced": ("reduce_scatter", 0),
    "reduce_scatter_tensor_inplace": ("reduce_scatter", 1),
    "reduce_scatter_inplace": ("reduce_scatter", 1),            # torch 2.14
    "legacy_reduce_scatter": ("reduce_scatter", 1),             # torch 2.14
    "all_to_all_single": ("all_to_all", 0), "all_to_all_single_autograd": ("all_to_all", 0),
    "all_to_all_inplace": ("all_to_all", 1), "broadcast": ("broadcast", 0),
    "permute_tensor": ("permute", 0), "isend_inplace": ("isend", 0), "irecv_inplace": ("irecv", 0),
    "legacy_allreduce": ("all_reduce", 0), "legacy_allgather": ("all_gather", 1),
    "legacy_all_gather": ("all_gather", 1), "legacy_allgather_single": ("all_gather", 1),
    "legacy_all_gather_base": ("all_gather", 1), "legacy_reducescatter": ("reduce_scatter", 1),
    "legacy_reducescatter_single": ("reduce_scatter", 1),
    "legacy_reduce_scatter_base": ("reduce_scatter", 1),
    "legacy_all_to_all_single": ("all_to_all", 1), "legacy_isend": ("isend", 0),
    "legacy_irecv": ("irecv", 0),
    # the backward of each autograd collective, public and callable with any `ctx` holding a
    # group's name: the operation it performs on the gradient (its argument 1)
    "all_reduce_backward": ("all_reduce", 1), "all_reduce_coalesced_backward": ("all_reduce", 1),
    "all_gather_into_tensor_backward": ("reduce_scatter", 1),
    "all_gather_into_tensor_coalesced_backward": ("reduce_scatter", 1),
    "reduce_scatter_tensor_backward": ("all_gather", 1),
    "reduce_scatter_tensor_coalesced_backward": ("all_gather", 1),
    "all_to_all_single_backward": ("all_to_all", 1),
    # batches of sends and receives, each send and receive recorded in one batch (family
    # "batch": batch_p2p_ops_inplace, wrap._wrap_funcol_batch; legacy_batch_p2p_ops is c10d's
    # batch_isend_irecv under another name, wrap._wrap_batch)
    "batch_p2p_ops_inplace": ("batch", None), "legacy_batch_p2p_ops": ("batch", None),
}
# Names of a newer torch than some clusters have (2.13: *_single; 2.14: the rest): install()
# wraps what this torch has.
NEWER_TORCH = {"all_gather_single", "reduce_scatter_single", "gather_single",
               "gather_into_tensor", "reduce_scatter_inplace", "legacy_reduce_scatter",
               # functional collectives torch 2.6 lacks
               "all_gather_single_autograd", "all_gather_single_coalesced", "irecv_inplace",
               "isend_inplace", "legacy_allgather_single", "legacy_irecv", "legacy_isend",
               "legacy_reducescatter_single", "reduce_scatter_single_autograd",
               "reduce_scatter_single_coalesced"}
# A process group's (and its backends') own C++ methods, which torch.distributed's functions
# call: when the code under test calls one itself, it is recorded as any other API of the
# operation it performs (rule 'Communication': any API of the same operation will do). The
# operation, and the positional index of what this rank contributes (self not counted).
PG_OWN = {
    "allreduce": ("all_reduce", 0), "allreduce_coalesced": ("all_reduce", 0),
    "allgather": ("all_gather", 1), "allgather_coalesced": ("all_gather", 1),
    "_allgather_base": ("all_gather", 1), "allgather_into_tensor_coalesced": ("all_gather", 1),
    "reduce_scatter": ("reduce_scatter", 1), "_reduce_scatter_base": ("reduce_scatter", 1),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", 1),
    "broadcast": ("broadcast", 0), "reduce": ("reduce", 0), "gather": ("gather", 1),
    "scatter": ("scatter", 1), "alltoall": ("all_to_all", 1), "alltoall_base": ("all_to_all", 1),
    "barrier": ("barrier", None), "send": ("isend", 0), "recv": ("irecv", 0),
    "recv_anysource": ("irecv", 0),
    "all_gather_single": ("all_gather", 1), "all_gather_single_coalesced": ("all_gather", 1),
    "reduce_scatter_single": ("reduce_scatter", 1),
    "reduce_scatter_single_coalesced": ("reduce_scatter", 1),
    "all_to_all_single": ("all_to_all", 1), "monitored_barrier": ("barrier", None),
}
# Communicating names recorded through the calls they make, with why.
INDIRECT = {"batch_isend_irecv": "each of its isend / irecv is recorded"}
P2P = ("send", "recv", "isend", "irecv")

# Which functions of funcol's modules communicate, found by what they are (their code names
# an operation of torch's c10d namespaces, or calls a function of the module that does, or
# is one of torch.distributed's communicating functions under another name), not by a list:
# install() wraps every one, so a torch that adds one cannot add it unlogged.
FUNCOL_MODULES = ("torch.distributed._functional_collectives",
                  "torch.distributed._functional_collectives_impl")
OP_NAMESPACES = ("_c10d_functional", "c10d_functional", "_c10d_functional_autograd")
NOT_ISSUING = {"wait_tensor"}          # waits for an operation issued by another op
# the operation each of those ops performs (its name, less these endings)
_OP_FAMILY = (("all_reduce", "all_reduce"), ("all_gather", "all_gather"),
              ("reduce_scatter", "reduce_scatter"), ("all_to_all", "all_to_all"),
              ("broadcast", "broadcast"), ("isend", "isend"), ("irecv", "irecv"),
              ("batch_p2p", "batch"))


def issuing_ops() -> set:
    """Names of the ops of torch's functional-collective namespaces that communicate."""
    import torch
    names = set()
    for full in torch._C._dispatch_get_all_op_names():
        ns, _, op = full.partition("::")
        if ns in OP_NAMESPACES and not op.startswith("_") and op not in NOT_ISSUING:
            names.add(op)
    return names


def _code_names(code) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


def ops_reached(fn, ops: set, seen=None) -> set:
    """The communicating ops `fn` (a function of funcol's modules) names, itself or through
    the functions of those modules it calls by their global names; for a function of
    torch.distributed's, {"c10d." + its name} when it is one of C10D's or INDIRECT's."""
    import inspect
    fn = inspect.unwrap(fn)
    seen = set() if seen is None else seen
    if not inspect.isfunction(fn) or fn in seen:
        return set()
    seen.add(fn)
    if fn.__module__ == "torch.distributed.distributed_c10d":
        return {f"c10d.{fn.__name__}"} if fn.__name__ in C10D or fn.__name__ in INDIRECT \
            else set()
    if fn.__module__ not in FUNCOL_MODULES:
        return set()
    names = _code_names(fn.__code__)
    found = names & ops if names & set(OP_NAMESPACES) else set()
    for name in names:
        value = fn.__globals__.get(name)
        if value is not None and value is not fn and inspect.isfunction(inspect.unwrap(value)):
            found |= ops_reached(value, ops, seen)
    return found


def funcol_communicating(module, ops=None) -> dict:
    """{name: (family, position)} of every function of `module` (one of FUNCOL_MODULES; its
    public names, and every name of the implementation module) that communicates; FUNCOL's
    family and position where it names it, else the family of the first op it reaches and
    its first argument but a `ctx`."""
    import inspect
    ops = issuing_ops() if ops is None else ops
    public_only = module.__name__ == FUNCOL_MODULES[0]
    out = {}
    for name, value in sorted(vars(module).items()):
        if (public_only and name.startswith("_")) or name.startswith("__") or \
                not inspect.isfunction(inspect.unwrap(value)):
            continue
        reached = ops_reached(value, ops)
        if not reached:
            continue
        if public_only and name in FUNCOL:
            out[name] = FUNCOL[name]
            continue
        first = sorted(reached)[0]
        family = next((f for key, f in _OP_FAMILY if key in first), "all_reduce")
        if first.startswith("c10d."):
            family = C10D.get(first[5:], ("batch",))[0]
        params = list(inspect.signature(inspect.unwrap(value)).parameters)
        out[name] = (family, 1 if params[:1] == ["ctx"] else 0)
    return out
RECEIVES = ("recv", "irecv")
