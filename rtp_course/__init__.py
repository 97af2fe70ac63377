"""rtp-course: distributed training in PyTorch, from data parallelism to Rotated Tensor Parallelism.

Yours to implement, one file per exercise (the notebooks say when):

    data_parallel.py   E1  a mini-DDP                           notebook 02
    comm.py            E2  Megatron's f and g                   notebook 03
    tensor_parallel.py E3  tensor-parallel layers               notebook 04
    rotation.py        E4  the ring rotation                    notebook 05
    flyweight.py       E5  Rotated Tensor Parallelism           notebook 06
    groups.py          E6  2D parallelism                       notebook 08

Given, in subpackages: `course` (the course table, the CLI), `checker`, `runtime`
(launching, communication log), `models`, `training` (data, strategies, memory,
benchmark), `notebook` (demos, plots, diagrams, timelines), `cluster` (Slurm).
"""
__version__ = "0.1.0"
