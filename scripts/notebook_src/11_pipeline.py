# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 11 · Pipeline parallelism: stages, GPipe and 1F1B (exercise E9)
#
# TODO(author): why this parallelism, what it splits, what it costs.
#
# You will edit **`rtp_course/pipeline.py`**.

# %%
from rtp_course.checker import check
from rtp_course.course.impl import default_impl
from rtp_course.notebook import where_checks_run

print("exercise code under test:", default_impl())

# %% [markdown]
# ## 1. Task E9.1 · TODO(author): `stage_layers`, `PipelineStage`, `stage`
#
# TODO(author): the idea, a figure, the math, the communication.

# %% [markdown]
# ## 2. Task E9.2 · TODO(author): `gpipe`
#
# TODO(author): the idea, a figure, the math, the communication.

# %% [markdown]
# ## 3. Task E9.3 · TODO(author): `one_f_one_b`
#
# TODO(author): the idea, a figure, the math, the communication.

# %% [markdown]
# ## 4. Check your work
#
# TODO(author): what the checker compares, on which world sizes.

# %%
print(where_checks_run())   # NCCL on a machine with 4 GPUs or more, else CPU and gloo
report = check("pipeline")

# %% [markdown]
# On a cluster, the same check on GPUs through Slurm (notebook 01, section 5): set `USE_SLURM`.

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import check_on_slurm
    check_on_slurm(["pipeline"], gpus=GPUS)

# %% [markdown]
# ## 5. Grading
#
# The cell below is read-only and graded after you submit: it runs the public and hidden checks on
# your `rtp_course/pipeline.py` and awards up to 20 points, in proportion to the checks that
# pass. In your copy the cell is empty: the grader puts the tests back. Use the check cell of
# section 4 to know where you stand.

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "e9_pipeline", "locked": true, "points": 20.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
from rtp_course.instructor.grading import grade
grade("pipeline")
### END HIDDEN TESTS
