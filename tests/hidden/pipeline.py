"""Hidden checks for E9 `pipeline` (instructor edition only): float32, a model of 7 blocks (an
uneven cut at 2, 3 and 4 stages), one micro-batch, and as many micro-batches as rows."""
from __future__ import annotations

from rtp_course.checker.public import pipeline as pub


class GPipeFloat32(pub.GPipe):
    name, hidden, dtype = "gpipe_float32", True, "float32"


class OneFOneBFloat32(pub.OneFOneB):
    name, hidden, dtype = "one_f_one_b_float32", True, "float32"


class GPipeUneven(pub.GPipe):
    """Seven blocks (stages of 1 and 2 blocks), 4 micro-batches of 3 rows and one of 12."""
    name, hidden = "gpipe_uneven", True
    num_layers, cases, steps = 7, (4, 1), False


class OneFOneBUneven(pub.OneFOneB):
    """Seven blocks, 12 micro-batches of one row (a long steady state), 3 and 1."""
    name, hidden = "one_f_one_b_uneven", True
    num_layers, cases, steps = 7, (12, 3, 1), False
