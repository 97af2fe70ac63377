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
RECEIVES = ("recv", "irecv")
