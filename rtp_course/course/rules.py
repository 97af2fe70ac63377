"""The course's rules, once: rules as rows, exercises as columns, the checks holding each cell.

A checker may enforce only what a rule states (COURSE_SPEC: "only the properties a stub's
Rules section states are enforced"), and a rejection quotes the rule it enforces
(`rule 'Name'`). Two kinds of rule:

* course-wide (`COURSE_WIDE`): stated here, shown by notebook 01 (`markdown()`), and named
  by every stub they apply to in one line ("Course-wide rules (rtp_course/course/rules.py):
  'Device', ...");
* an exercise's own: stated in its stub's "Rules" section as a bullet "* Name: ...", with that
  exercise's particulars (what its functions may communicate, which layout).

`RULES` maps each rule to the exercises it applies to and, per exercise, the public checks
that hold it there ("*": every public check of the exercise, as for 'Device', which every
rank of every check runs under). tests/test_rules_stated.py proves each cell with a wrong
implementation that breaks that rule in that exercise (tests/wrong/<exercise>/, marked
`RULE: Name`) and fails one of the cell's checks, and keeps the stubs and this table in step.
"""
from __future__ import annotations

from dataclasses import dataclass

from rtp_course.course import EXERCISES

ALL = "*"
EVERY = dict.fromkeys(EXERCISES, ALL)      # a rule every check of every exercise holds


@dataclass(frozen=True)
class Rule:
    name: str            # quoted by rejections: rule 'Name'
    text: str            # what students read (course-wide ones); a summary for the others
    held_by: dict        # {exercise module: tuple of public check names, or ALL}
    course_wide: bool = False


MEASURED = (
    "What the checker measures, on every rank: outputs, input and parameter gradients, and "
    "the weights after SGD and Adam steps, against serial PyTorch; every call your code makes "
    "to torch.distributed's functions (or its functional collectives), recorded where you make "
    "it (its kind, bytes, peer and process group), which the communication rules judge, so "
    "communicate through those functions only (torch's DistributedDataParallel, whose C++ "
    "reducer is out of sight, is refused); and, where an exercise has a Memory rule, every "
    "tensor storage the rank keeps alive, wherever it is kept and whether a tensor or a storage "
    "object alone holds it (full.untyped_storage()), less what it may keep, each "
    "tensor counted by the bytes it spans (a parameter that is a view of a full weight keeps "
    "all of it).")

_COURSE_WIDE = (
    Rule("Device",
         "Make every tensor on the device of the data it meets: torch.empty(shape, "
         "dtype=x.dtype, device=x.device), x.new_empty(shape), torch.empty_like(x); parameters "
         "on their module's device. On a GPU run a tensor made without device= is in CPU "
         "memory, where CUDA refuses to mix it with GPU tensors and NCCL refuses to send it (a "
         "0-dim CPU scalar or an index tensor is fine). Wherever NCCL and gloo differ the "
         "checker behaves as NCCL on CPU too: a tensor made without device= is refused; "
         "dist.batch_isend_irecv returns ONE handle for the whole batch (wait on every handle "
         "it returns, never unpack them); a rank's operations on a group run in the order they "
         "were posted, and a send waits for its receive.",
         EVERY, True),
    Rule("Contiguity",
         "A tensor you give a collective or a send must be contiguous: NCCL refuses a view such "
         "as x.t(), x[:, 1:] or x.narrow(...) in a collective and sends the wrong bytes of one "
         "in a send (gloo takes it), so the checker refuses it on CPU too. Communicate "
         "x.contiguous(), and return contiguous gradients where the next layer communicates "
         "them.",
         {"comm": ("AllReduce", "AllGather"), "rotation": ("rotate",), "experts": ("AllToAll",)},
         True),
    Rule("Dtypes",
         "Keep the dtype of the tensors you are given: make buffers and helper tensors with "
         "dtype=x.dtype (x.new_empty, torch.empty_like), never in the default float32, and "
         "return results in the dtype of the data they came from. Public checks run in "
         "float64, hidden ones also in float32, float16 and bfloat16; a result of another "
         "dtype fails whatever its values.",
         EVERY, True),
    Rule("Send buffers",
         "A tensor handed to a send (dist.isend, a P2POp of dist.batch_isend_irecv, your "
         "rotate_async) may be written to again only after its work is waited: NCCL reads it "
         "while the transfer runs (gloo often copies it early and hides the bug). The checker "
         "notes each send buffer's version when it is posted and when its work is waited.",
         {"rotation": ALL, "flyweight": ALL, "context_parallel": ALL}, True),
)

_OWN = (
    Rule("Results", "Every rank's results are those its docstrings state, compared with serial "
         "PyTorch at world sizes 1 to 4 (a group of one rank included); a module called twice "
         "before one backward gives both calls' gradients, and a later call leaves an earlier "
         "output as it was.",
         EVERY),
    Rule("Communication", "What each function's docstring lists under Communication, and nothing "
         "more; any API of the same operation will do, fewer messages are fine.",
         EVERY),
    Rule("Group", "Use `group` for every collective, rank and size; its ranks need not be "
         "consecutive (a group of ranks {0, 2}), and global ranks only where a call takes one.",
         {"data_parallel": ("average_gradients_subgroups", "DataParallel_subgroups"),
          "comm": ("subgroups",),
          "tensor_parallel": ("ParallelMLP_subgroup", "ParallelEmbedding_subgroup",
                              "parallelize_transformer_subgroup"),
          "rotation": ("ring_peers", "subgroup"), "flyweight": ("Linear_subgroup",),
          "groups": ("train_2d_bert",), "sharding": ("FullyShardedDataParallel_subgroups",),
          "context_parallel": ("subgroup", "subgroup_causal"),
          "experts": ("AllToAll_subgroups", "exchange_splits_subgroups", "train_step_ep_dp",
                      "sync_gradients_subgroups"),
          "pipeline": ("PipelineStage", "subgroup", "data_parallel_pipeline")}),
    Rule("Accumulation", "Gradients accumulate as in serial PyTorch: two backward passes without "
         "zero_grad leave the sum.",
         {"data_parallel": ("DataParallel_frozen_accumulated",), "flyweight": ("FlyweightWrapper",),
          "sharding": ("FullyShardedDataParallel_accumulated",)}),
    Rule("Frozen and unused", "A parameter that does not require grad stays so and gets no "
         "gradient; one that forward did not use gets none either, and nothing waits for it.",
         {"data_parallel": ("DataParallel_frozen_accumulated",),
          "tensor_parallel": ("parallelize_transformer_bert",), "flyweight": ("MnistCNN",),
          "groups": ("train_2d_bert",),
          "sharding": ("ShardedOptimizer", "ShardedOptimizer_weight_decay")}),
    Rule("Memory", "A rank keeps only its shards (and replicated parameters, and what its "
         "exercise's rule allows besides): no other tensor of the weights, wherever kept; in "
         "ring attention, no received key/value block beyond the one in hand and the one "
         "arriving.",
         {"tensor_parallel": ALL, "flyweight": ALL,
          "sharding": ("ShardedOptimizer", "FullyShardedDataParallel"),
          "context_parallel": ("ring_attention", "ring_attention_backward"),
          "pipeline": ("one_f_one_b", "data_parallel_pipeline")}),
    Rule("Layout", "Which slice of each serial tensor (or which ranks) each rank holds: the "
         "exercise's table.",
         {"tensor_parallel": ALL, "flyweight": ALL, "groups": ("build_groups", "parallelize_2d"),
          "sharding": ("ShardedOptimizer", "FullyShardedDataParallel"),
          "context_parallel": ("zigzag",), "experts": ("ExpertParallelMoE",),
          "pipeline": ("stage_layers", "PipelineStage")}),
    Rule("Raises", "Raise the error a docstring promises (a size that does not divide, a bad "
         "argument), naming what is wrong, before anything else is done.",
         {"comm": ("Split",),
          "tensor_parallel": ("ColumnParallelLinear_sizes_not_divisible",
                              "RowParallelLinear_sizes_not_divisible",
                              "ParallelMLP_sizes_not_divisible",
                              "ParallelEmbedding_sizes_not_divisible",
                              "ParallelSelfAttention_sizes_not_divisible",
                              "parallelize_transformer_rejects_cnn"),
          "rotation": ("bad_direction", "ring_reduce_scatter"), "groups": ("build_groups",),
          "context_parallel": ("zigzag",),
          "experts": ("ExpertParallelMoE_experts_not_divisible",)}),
    Rule("New tensors", "Never modify the caller's tensors; return new tensors, never an alias "
         "of an input or of a buffer kept for the next call.",
         {"comm": ALL, "rotation": ALL,
          "context_parallel": ("ring_attention", "ring_attention_backward"),
          "experts": ("AllToAll", "exchange_splits", "ExpertParallelMoE")}),
    Rule("Build it yourself", "From torch.distributed collectives and autograd hooks; torch's "
         "DistributedDataParallel is refused.", {"data_parallel": ("DataParallel",)}),
    Rule("Replicated", "A replicated parameter gets the same full gradient on every rank.",
         {"tensor_parallel": ALL}),
    Rule("Point-to-point only", "Rotations send and receive, never a collective.",
         {"rotation": ALL, "context_parallel": ("ring_attention", "ring_attention_causal",
                                                "ring_attention_backward"),
          "pipeline": ("gpipe", "one_f_one_b")}),
    Rule("Post together", "Post a rotation's receive and send together, then wait: one "
         "batch_isend_irecv, or rank-parity order (a separate isend and irecv run one after "
         "the other on NCCL's stream).",
         {"rotation": ALL}),
    Rule("Wait on every work", "Wait on every work started, the send's too, before the transfer "
         "is finished for the caller.", {"rotation": ALL, "pipeline": ("gpipe", "one_f_one_b")}),
    Rule("Receivers allocate", "A receiver allocates what arrives: recv_shape and recv_dtype.",
         {"rotation": ("rotate", "rotate_uneven")}),
    Rule("Rotation only", "Weights travel by rotation only, never a collective.",
         {"flyweight": ALL}),
    Rule("Overlap", "A transfer starts before the compute it hides behind: a shard's (or a "
         "key/value block's) rotation before the compute with it in hand, the step's work (a "
         "product, attention, a convolution or a lookup; not any op), the next layer's "
         "gather before the current layer's compute.",
         {"flyweight": ALL, "sharding": ("FullyShardedDataParallel",),
          "context_parallel": ("ring_attention", "ring_attention_backward")}),
    Rule("Schedule", "A pipeline schedule runs each stage's forwards and backwards in the order "
         "its definition states (GPipe: every forward first; 1F1B: warm-up, one forward one "
         "backward, cool-down); how the transfers between them are posted is free.",
         {"pipeline": ("gpipe", "one_f_one_b", "data_parallel_pipeline")}),
)

RULES = {r.name: r for r in _COURSE_WIDE + _OWN}
COURSE_WIDE = tuple(r.name for r in _COURSE_WIDE)


def applying_to(exercise: str, course_wide: bool | None = None) -> list[Rule]:
    """The rules that apply to `exercise` (only the course-wide or only its own ones if asked)."""
    return [r for r in RULES.values() if exercise in r.held_by
            and (course_wide is None or r.course_wide == course_wide)]


def pointer(exercise: str) -> str:
    """The line a stub's Rules section starts with: the course-wide rules it is under."""
    names = ", ".join(f"'{r.name}'" for r in applying_to(exercise, course_wide=True))
    return f"Course-wide rules (rtp_course/course/rules.py, notebook 01): {names}."


def markdown() -> str:
    """The course-wide rules as notebook 01 shows them."""
    lines = ["**The course-wide rules.** Every exercise's checks hold these (the stubs name "
             "the ones that apply); each exercise's own rules are in its stub's Rules section.",
             ""]
    for name in COURSE_WIDE:
        rule = RULES[name]
        where = ", ".join(f"`{ex}`" for ex in rule.held_by)
        lines.append(f"* **{name}** ({where}): {rule.text}")
    lines += ["", MEASURED]
    return "\n".join(lines)
