"""Grading's hardening layer: what the judging core does not need, and grading adds.

`rtp-course grade` and `rtp-course check --hidden` run the code under test confined; a
student's own `rtp-course check` and the notebooks do not. Two parts:

* `Isolation` (a launch's): its ranks in namespaces of their own (launcher.launch calls
  `enter` first thing in each rank): a private network for the launch, a PID namespace
  and a mount namespace per rank;
* `rank.confine` (a rank's, after it loaded the checks and opened its files, before the
  code under test is imported): its environment, resource limits, and what it may read,
  write and call (Landlock, a seccomp filter), unprivileged even under a root grader.

docs/SECURITY.md says what this guarantees, on which kernels and for which grader users,
and which test holds each guarantee.
"""
from rtp_course.confinement.launch import Isolation

__all__ = ["Isolation"]
