"""environment.yml and pyproject.toml list the same dependencies; the CLI lists the spec's commands."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _name(req: str) -> str:
    return re.split(r"[<>=!\[ ]", req.strip(), maxsplit=1)[0].lower()


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = {_name(r) for r in pip if not r.startswith("-e")}
    assert listed == wanted, f"only in environment.yml: {listed - wanted}; only in pyproject: {wanted - listed}"


def test_cli_lists_the_spec_subcommands():
    out = subprocess.run([sys.executable, "-m", "rtp_course.cli", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for cmd in ("check", "release", "submit", "bench", "info"):
        assert cmd in out


def test_ci_pins_torch_before_installing_the_project():
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("torch==2.13.0") < ci.index("-e '.[dev]'")
