"""The warm check server's process: `python -m rtp_course.cli.warm_server WHERE FP PACKAGE FD`,
started by warm.start_after_this_command.

The server's runs are the command line's own `rtp-course check`: its entry point hands the
command line's main down to warm.serve, so warm.py, which the command line imports, never
imports the command line back.
"""
import sys
from pathlib import Path

from rtp_course.cli import main, warm

if __name__ == "__main__":
    warm.serve(Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), run=main)
