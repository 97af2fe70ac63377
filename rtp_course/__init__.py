"""rtp-course: distributed training in PyTorch, from data parallelism to Rotated Tensor Parallelism.

Exercise modules (yours to implement): data_parallel, comm, tensor_parallel,
rotation, flyweight, groups. Everything else here is given infrastructure.
"""
__version__ = "0.1.0"

EXERCISES = ("data_parallel", "comm", "tensor_parallel", "rotation", "flyweight", "groups")
