# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 11 · A toy exercise (exercise E0)
#
# Every rank holds a vector of its own; all of them need the sum. One all-reduce gives it to
# every rank at once.
#
# You will edit **`rtp_course/toy.py`**.

# %%
from rtp_course.checker import check
from rtp_course.course.impl import default_impl
from rtp_course.notebook import where_checks_run

print("exercise code under test:", default_impl())

# %% [markdown]
# ## 1. Task E0.1 · the group's sum: `total`
#
# `total(x, group)` returns the sum of every rank's `x`: all-reduce a copy of `x` over `group`
# (the caller keeps its `x`).

# %% [markdown]
# ## 2. Check your work
#
# The checker runs `total` on 1 to 4 ranks and compares each rank's result with the serial sum.

# %%
print(where_checks_run())   # NCCL on a machine with 4 GPUs or more, else CPU and gloo
report = check("toy")

# %% [markdown]
# On a cluster, the same check on GPUs through Slurm (notebook 01, section 5): set `USE_SLURM`.

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import check_on_slurm
    check_on_slurm(["toy"], gpus=GPUS)

# %% [markdown]
# ## 3. Grading
#
# The cell below is read-only and graded after you submit: it runs the public and hidden checks on
# your `rtp_course/toy.py` and awards up to 5 points, in proportion to the checks that
# pass. In your copy the cell is empty: the grader puts the tests back. Use the check cell of
# section 2 to know where you stand.

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "e0_toy", "locked": true, "points": 5.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
from rtp_course.instructor.grading import grade
grade("toy")
### END HIDDEN TESTS
