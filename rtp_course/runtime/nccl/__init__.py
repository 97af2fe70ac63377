"""NCCL's rules, held on CPU too: one grade whether the checks ran on gloo or on GPUs.

Where gloo and NCCL behave differently, a checker rank on CPU behaves as NCCL does:

* `calls`: what happens to a call as it is made (refused tensors and arguments, AVG,
  tags, one handle for a batch, repeated waits, completion without a wait);
* `order`: whether the calls a rank made, in the order it made them, would complete on
  NCCL's streams (a run gloo completed may hang on a GPU), judged in the parent.

DESIGN.md ("One grade: NCCL's rules on CPU") has the table: for each difference, what NCCL
does (and where in torch's ProcessGroupNCCL), what gloo does, what the checker does, and
the test that holds it (tests/test_nccl_semantics.py, whose cases also run on NCCL in
scripts/gpu_proof.sh).
"""
from rtp_course.runtime.nccl.calls import RULE, Coalesced, NCCLRuleError, before, warm_up_ring
from rtp_course.runtime.nccl.order import ReplayTooLong, describe, simulate, size_mismatch

__all__ = ["RULE", "Coalesced", "NCCLRuleError", "before", "warm_up_ring", "describe",
           "simulate", "size_mismatch", "ReplayTooLong"]
