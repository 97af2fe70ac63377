"""The late penalty on what the code earned.

nbgrader computes a late notebook's penalty while it autogrades, when the grading cells still
hold 0 (they award nothing there, grading.py says why): `rtp-course grade` writes the code
points afterwards, so it computes the penalty again, with the plugin nbgrader's configuration
names (`LateSubmissionPlugin.penalty_method`, or `AssignLatePenalties.plugin_class`, a
subclass of nbgrader's LateSubmissionPlugin; in nbgrader_config.py or a Jupyter config
directory, as nbgrader reads them), on each notebook's score with its code points. `rtp-course export` refuses a gradebook whose penalties do not match.
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys

SECTIONS = ("LateSubmissionPlugin", "AssignLatePenalties")

# The configuration is read as nbgrader reads it (Jupyter's config directories, then
# nbgrader_config.py of the working directory), in a process of its own: nbgrader_config.py
# has side effects (a kernelspec, environment variables). It prints the late penalty's settings.
_READ = r"""
import json, os, sys
os.chdir(sys.argv[1])
from nbgrader.apps.baseapp import NbGrader
app = NbGrader()
app.load_config_file()
config = app.config
out = {}


def as_data(o):
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"a {type(o).__name__} is not data")


cls = config.get("AssignLatePenalties", {}).get("plugin_class")
if cls is not None:
    cls = cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
    out["plugin_class"] = cls
for section in {"LateSubmissionPlugin", cls.rsplit(".", 1)[-1] if cls else ""} - {""}:
    values = {}
    for k, v in config.get(section, {}).items():
        try:              # settings as data: lists, dicts, sets (as lists: traitlets casts back)
            values[k] = json.loads(json.dumps(v, default=as_data))
        except (TypeError, ValueError) as e:
            sys.exit(f"{section}.{k} = {v!r} cannot be passed on ({e}): give it as numbers, "
                     f"strings, lists or dicts")
    if values:
        out[section] = values
print(json.dumps(out))
"""


@functools.lru_cache(maxsize=None)
def settings(repository: str) -> dict:
    """{"plugin_class": dotted name, section: {trait: value}} of the configuration nbgrader
    reads when run in `repository` ({} where it sets nothing of the late penalty)."""
    r = subprocess.run([sys.executable, "-c", _READ, repository], capture_output=True,
                       text=True, cwd=repository, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"nbgrader_config.py could not be read for its late penalty: "
                           f"{(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return json.loads(r.stdout.strip().splitlines()[-1] or "{}")


def plugin(found: dict):
    """The configured late penalty plugin (nbgrader's LateSubmissionPlugin by default)."""
    from nbgrader.plugins import LateSubmissionPlugin
    from traitlets.config import Config
    from traitlets.utils.importstring import import_item
    from rtp_course.instructor import REPOSITORY
    if str(REPOSITORY) not in sys.path:      # nbgrader runs there: a plugin module beside it
        sys.path.append(str(REPOSITORY))     # imports, as nbgrader's own run imports it
    cls = import_item(found["plugin_class"]) if found.get("plugin_class") else LateSubmissionPlugin
    config = Config({k: v for k, v in found.items() if isinstance(v, dict)})
    return cls(config=config)


def penalty(the_plugin, student: str, score: float, seconds_late: float) -> float | None:
    """What nbgrader's AssignLatePenalties would give a notebook of `score` (None: none)."""
    if not seconds_late or seconds_late <= 0:
        return None
    got = the_plugin.late_submission_penalty(student, score, seconds_late)
    return None if got is None else min(max(float(got), 0.0), float(score))


def _same(a, b) -> bool:
    return abs((a or 0.0) - (b or 0.0)) < 1e-6


def apply(gb, assignment: str, student: str, the_plugin) -> list[str]:
    """Set the penalty of each notebook of `student`'s `assignment` on its current score;
    what changed, as text ('02_data_parallelism: 0 -> 26.67')."""
    sub = gb.find_submission(assignment, student)
    gb.db.expire_all()                     # scores are computed from the grades just written
    changed = []
    for nb in sub.notebooks:
        now = penalty(the_plugin, student, nb.score, sub.total_seconds_late)
        if not _same(now, nb.late_submission_penalty):
            changed.append(f"{nb.name}: {nb.late_submission_penalty or 0:g} -> {now or 0:g}")
            nb.late_submission_penalty = now
    gb.db.commit()
    return changed


def stale(gb, assignment: str, student: str, the_plugin) -> list[str]:
    """The notebooks whose penalty is not what their score and lateness give."""
    sub = gb.find_submission(assignment, student)
    return [f"{nb.name}: late penalty {nb.late_submission_penalty or 0:g}, its score of "
            f"{nb.score:g} gives {penalty(the_plugin, student, nb.score, sub.total_seconds_late) or 0:g}"
            for nb in sub.notebooks
            if not _same(penalty(the_plugin, student, nb.score, sub.total_seconds_late),
                         nb.late_submission_penalty)]
