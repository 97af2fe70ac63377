"""The last module the ranks' forkserver preloads: it takes what was imported out of the
garbage collector's reach (gc.freeze), as Python advises before forking, and, in a forkserver
that multiprocessing started, serves only its launcher and forbids CUDA (it forks the ranks).

A collection in a rank then never walks, and so never copies, the forkserver's pages; and
the forkserver's own exit skips collecting torch's module graph, 0.7 s that a reader of the
command's output (a pipe: `rtp-course check | less`, a test) would wait for, since the
forkserver holds the command's stdout for the ranks' prints.
"""
import gc
import os

from rtp_course.runtime import devices, forkserver

if forkserver.in_spawned_forkserver():
    forkserver.serve_only(os.getppid())        # the launcher that started it, and no rank
    devices.forbid_cuda("the ranks' forkserver")

gc.freeze()
