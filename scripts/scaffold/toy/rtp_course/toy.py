"""Exercise E0: a toy exercise.

Notebook: notebooks/11_toy.ipynb. Check: `rtp-course check toy`.
Tasks (each TODO below says its task; the notebook section of that number teaches it):

    E0.1  section 1: `total`

Every rank holds its own vector x of shape [n]; `total` returns, on every rank, the sum of
all the group's vectors, also [n]: one all-reduce of a copy of x.

Rules your code must follow (the checker tests each one).
Course-wide rules (rtp_course/course/rules.py, notebook 01): 'Device', 'Dtypes'.
* Results: every rank returns the sum over the group, for every group size, and leaves x as it
  was.
* Communication: one all-reduce per call (any all-reduce API), and nothing else.
"""
import torch
import torch.distributed as dist


def total(x, group=None):
    """The sum of every rank's x, on every rank.

    x: [n], this rank's own values. Returns [n], the same on every rank of `group`.
    Communication: one all-reduce.
    """
    raise NotImplementedError("[E0.1] total: copy x (it is the caller's), all-reduce the copy "
                              "over group, return it")
