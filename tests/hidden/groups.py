"""Hidden checks for E6 `groups` (instructor edition only): the other layouts of 4 ranks
(tp 1 x dp 4, tp 4 x dp 1), the transformer LM, three steps."""
from __future__ import annotations

from rtp_course.checker.public import groups as pub
from rtp_course.checker.public.tensor_parallel import ModelLM


class BuildGroupsTP1(pub.BuildGroups):
    name, world_sizes, tp_size, hidden = "build_groups_tp1", (4,), 1, True


class BuildGroupsTP4(pub.BuildGroups):
    name, world_sizes, tp_size, hidden = "build_groups_tp4", (4,), 4, True


class Train2DLM(pub.Train2D):
    name, world_sizes, steps, hidden, case = "train_2d_lm", (4,), 3, True, ModelLM()


class Train2DLMDataParallelOnly(pub.Train2D):
    """tp 1 x dp 2 and dp 4: every layer is whole, the groups code is plain data parallelism."""
    name, world_sizes, tp_size, hidden, case = "train_2d_lm_tp1", (2, 4), 1, True, ModelLM()


class Train2DBertTensorParallelOnly(pub.Train2D):
    """tp 4 x dp 1: one replica; sync_gradients averages over groups of one rank."""
    name, world_sizes, tp_size, hidden = "train_2d_bert_tp4_dp1", (4,), 4, True
