"""`python -m rtp_course.training.train`: local runs with --nproc, the same losses for every
data-parallel-like strategy and across reruns, a clear message for a stub."""
import math
import os
import re
import subprocess
import sys

import pytest

from rtp_course.training import train
from rtp_course.runtime.launcher import launch

ARGS = ["--tiny", "--steps", "3", "--nproc", "2", "--impl", "solutions"]


def _losses(strategy, nproc=2):
    args = train.build_parser().parse_args(["--strategy", strategy, *ARGS])
    return launch(train._spawned, nproc, (train.options(args, nproc),), timeout=120)[0]


@pytest.fixture(scope="session")  # one build per test process (conftest: SHARED_FIXTURES)
def cli_ddp():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "rtp_course.training.train", "--strategy", "ddp", *ARGS],
                          capture_output=True, text=True, timeout=180, env=env)


def test_cli_prints_a_finite_decreasing_loss_per_step(cli_ddp):
    assert cli_ddp.returncode == 0, cli_ddp.stderr
    losses = [float(v) for v in re.findall(r"step +\d+/3 +loss (\S+)", cli_ddp.stdout)]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]


def test_rerun_and_rtp_give_the_same_losses_as_ddp(cli_ddp):
    printed = [float(v) for v in re.findall(r"loss (\S+)", cli_ddp.stdout)]
    ddp = _losses("ddp")
    assert [round(v, 4) for v in ddp] == printed          # a rerun: identical
    rtp = _losses("rtp")
    assert rtp == pytest.approx(ddp, rel=1e-5, abs=1e-6)  # RTP trains the same model as DDP


def test_a_stub_says_which_notebook_to_do(capsys):
    code = train.main(["--strategy", "rtp", "--tiny", "--steps", "1", "--nproc", "1",
                       "--impl", "rtp_course"])
    assert code == 2
    assert "implement flyweight.RotatedTensorParallel in rtp_course/flyweight.py first (task E5.2, notebook 06" in capsys.readouterr().err


def test_model_flags_map_to_each_model():
    parse = train.build_parser().parse_args
    lm = train.model_config(parse(["--ninp", "64", "--nhead", "4"]))
    assert lm["ninp"] == 64 and lm["nhead"] == 4 and lm["nhid"] == train.DEFAULT_CONFIGS["lm"]["nhid"]
    bert = train.model_config(parse(["--model", "bert", "--ninp", "64", "--nhid", "256",
                                     "--num-decoder-layers", "3"]))
    assert (bert["hidden_dim"], bert["ffn_mult"], bert["num_layers"]) == (64, 4, 3)
    with pytest.raises(ValueError, match="fixed shapes"):
        train.model_config(parse(["--model", "cnn", "--ninp", "64"]))
