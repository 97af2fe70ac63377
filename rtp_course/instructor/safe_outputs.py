"""Students' cell outputs made inert before an instructor's or a student's browser renders them.

A notebook cell can display anything: `IPython.display.HTML('<script>...</script>')`,
`Javascript(...)`, an SVG with a script, a widget, Markdown with raw HTML, or a crafted
`publish_display_data` (an "image/png" that is not base64, metadata that the HTML templates
write into an attribute unescaped). nbconvert's HTML templates render text/html, JavaScript,
SVG, Markdown and widget views as they are: into the feedback pages (`nbgrader
generate_feedback`) and formgrader's pages of the autograded notebook.

`SafeOutputs`, an nbconvert Preprocessor registered in nbgrader_config.py (after autograde's
execution, and again before generate_feedback renders), keeps of each output only what is
rendered as text or as an image: "text/plain" (which the templates escape), and PNG, JPEG and
GIF images whose data is base64. Every other MIME type is removed; where nothing is left to
show, its text becomes the "text/plain" (shown escaped, as source). Outputs' metadata and the
notebook's widget state are removed, a stream's name is stdout or stderr. Errors stay (their
traceback is escaped, and autograde scores a test cell by them). Markdown and raw cells are
the notebook's own source, not outputs: not changed here. An output's text or image over
`MAX_OUTPUT` characters is cut to its head and a line that says how much was removed: the
autograded notebook, which formgrader and generate_feedback read whole, stays small.
"""
from __future__ import annotations

import json
import re

from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from traitlets import Bool

TEXT = "text/plain"
IMAGES = ("image/png", "image/jpeg", "image/gif")
MAX_OUTPUT = 2 << 20       # characters of one output's text or image (a plot is ~100 KB)
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")


class SafeOutputs(Preprocessor):
    """Every code cell's outputs reduced to escaped text and base64 images (see the module)."""

    enabled = Bool(True, help="nbconvert's preprocessors run only when enabled").tag(config=True)

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)        # widget state: written into a <script> block
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            cell.outputs = [o for o in map(safe_output, cell.get("outputs", [])) if o is not None]
        return cell, resources


def safe_output(output):
    """`output` with only escaped text and base64 images; None for an unknown output type."""
    kind = output.get("output_type")
    if kind == "stream":
        if output.get("name") not in ("stdout", "stderr"):
            output["name"] = "stdout"
        output["text"] = _cut(output.get("text", ""))
        return output
    if kind == "error":
        return output
    if kind not in ("display_data", "execute_result"):
        return None
    data, kept, removed = output.get("data", {}), {}, []
    for mime, value in data.items():
        if mime == TEXT and isinstance(value, str):
            kept[mime] = _cut(value)
        elif mime in IMAGES and isinstance(value, str) and len(value) > MAX_OUTPUT:
            kept.setdefault(TEXT, f"[an image of {len(value) >> 20} MB was removed: an "
                                  f"output keeps at most {MAX_OUTPUT >> 20} MB]")
        elif mime in IMAGES and isinstance(value, str) and _BASE64.match(value):
            kept[mime] = value
        else:
            removed.append(value if isinstance(value, str) else json.dumps(value, default=str))
    if removed and not kept:
        kept[TEXT] = _cut(removed[0])          # the HTML (or script) as text: shown escaped
    output["data"] = NotebookNode(kept)
    output["metadata"] = NotebookNode()
    return output


def _cut(text):
    """`text` (a string, or a stream's list of strings), its head kept if it is over
    MAX_OUTPUT characters."""
    if isinstance(text, list):
        text = "".join(t for t in text if isinstance(t, str))
    if not isinstance(text, str) or len(text) <= MAX_OUTPUT:
        return text
    return (text[:MAX_OUTPUT] + f"\n[... {len(text) - MAX_OUTPUT} more characters of output "
                                f"were removed: an output keeps at most {MAX_OUTPUT >> 20} MB]\n")
