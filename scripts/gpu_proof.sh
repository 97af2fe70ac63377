#!/bin/bash
# The one-GPU proof run (issue 36): does the course run on a GPU? One log, one summary.
#
#   scripts/gpu_proof.sh [--out DIR] [--budget SECONDS] [--only STEP ...]
#   scripts/gpu_proof.sh --dry-run          # the same steps on CPU (gloo, tiny): what CI runs
#
# On a machine with one GPU, a CUDA build of torch already installed, no internet, and the
# course installed from this checkout without its dependencies (pip install --no-deps -e .),
# in at most 9 1/3 minutes (--budget, default 560 s) it runs, each step within a time cap:
#   environment      the GPU's model and memory, torch, CUDA, NCCL, the driver
#   doctor           `rtp-course doctor --backend nccl`, its ranks sharing the GPU
#   checks, 1 rank   the reference's public and hidden checks on NCCL at world size 1
#   checks, 2-4      rotation (public and hidden) at 2, 3 and 4 ranks, flyweight, pipeline and
#                    experts (public and hidden) at 2, the ranks sharing the GPU
#                    (RTP_COURSE_SHARE_GPU=1: each its own NCCL host id, sockets over the
#                    loopback)
#   NCCL semantics   every pattern of tests/helpers/nccl_patterns.py on NCCL: its label against what
#                    NCCL did (a hang is a timeout); a dry run tries one pattern per label, since
#                    tests/test_nccl_semantics.py runs them all on CPU
#   benchmark        one step per strategy, `rtp-course bench --preset gpu` at 4 layers, 2 ranks
#   notebook demos   the notebooks' demos with the reference, on NCCL
# and writes DIR/gpu-proof.log (every step's output) and DIR/summary.md (the figures that
# docs/PERFORMANCE.md quotes, with the GPU model). DIR: $OUT/gpu-proof where $OUT is set,
# else ./gpu-proof. Exit status 0 only if every step passed.
#
# Environment: RTP_PYTHON, the Python with the course installed (default: python3).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${RTP_PYTHON:-python3}" "$here/gpu_proof.py" "$@"
