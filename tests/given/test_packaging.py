"""environment.yml and pyproject.toml list the same dependencies; the CLI lists the spec's commands."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ]", req.strip(), maxsplit=1)[0].lower()


def test_environment_yml_installs_what_pyproject_asks_for():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r): r for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    got = {_name(r): r for r in pip if not r.startswith("-e")}
    assert "-e ." in pip
    assert set(got) == set(wanted), (set(got) ^ set(wanted))
    for name, req in wanted.items():
        if name != "torch":
            assert got[name].replace(" ", "") == req.replace(" ", ""), (got[name], req)
    pinned = re.fullmatch(r"torch==(\d+)\.(\d+)\.\d+", got["torch"])
    bounds = re.fullmatch(r"torch>=(\d+)\.(\d+),<(\d+)\.(\d+)", wanted["torch"])
    low, high = (int(bounds[1]), int(bounds[2])), (int(bounds[3]), int(bounds[4]))
    assert low <= (int(pinned[1]), int(pinned[2])) < high, got["torch"]


def test_environment_yml_cites_only_files_that_exist():
    text = (ROOT / "environment.yml").read_text()
    for cited in re.findall(r"tests/[\w/]+\.py", text):
        assert (ROOT / cited).is_file(), cited


def test_cli_lists_the_spec_subcommands():
    out = subprocess.run([sys.executable, "-m", "rtp_course.cli", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for cmd in ("check", "release", "submit", "bench", "info"):
        assert cmd in out


def test_ci_pins_torch_before_installing_the_project():
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("torch==2.13.0") < ci.index("-e '.[dev]'")
