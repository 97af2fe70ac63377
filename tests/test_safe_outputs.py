"""rtp_course.instructor.safe_outputs: what a student's cell displays reaches no browser as active
content, neither through the autograded notebook (formgrader) nor through nbgrader's feedback."""
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter
from nbformat.v4 import new_code_cell, new_notebook, new_output

from rtp_course.instructor.safe_outputs import SafeOutputs

ROOT = Path(__file__).resolve().parents[1]
MARK = "window.RTP_PWNED"
SCRIPT = f"<script>{MARK} = 1</script>"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def hostile_notebook():
    """A cell's outputs as a student's code can make them (IPython.display, publish_display_data)."""
    html = new_output("display_data", {"text/html": SCRIPT,
                                       "text/plain": "<IPython.core.display.HTML object>"})
    js = new_output("display_data", {"application/javascript": f"{MARK} = 2",
                                     "text/plain": "<IPython.core.display.Javascript object>"})
    svg = new_output("display_data",
                     {"image/svg+xml": f"<svg xmlns='http://www.w3.org/2000/svg'>{SCRIPT}</svg>"})
    widget = new_output("display_data", {"application/vnd.jupyter.widget-view+json":
                                         {"model_id": "x", "version_major": 2, "version_minor": 0},
                                         "text/plain": "IntSlider(value=0)"})
    markdown = new_output("execute_result", {"text/markdown": f"**bold** {SCRIPT}"}, execution_count=1)
    bad_png = new_output("display_data", {"image/png": f'"><script>{MARK} = 3</script>'})
    png = new_output("display_data", {"image/png": PNG, "text/plain": "<Figure>"},
                     metadata={"image/png": {"width": f'1 onerror="{MARK} = 4"'}})
    stream = new_output("stream", name=f'"><script>{MARK} = 5</script>', text="hello\n")
    error = new_output("error", ename="ValueError", evalue="no", traceback=["ValueError: no"])
    cell = new_code_cell("show()", outputs=[html, js, svg, widget, markdown, bad_png, png, stream, error])
    nb = new_notebook(cells=[cell])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json":
                              {"state": {"x": {"note": f"</script>{SCRIPT}"}}, "version_major": 2,
                               "version_minor": 0}}
    return nbformat.from_dict(nb)


def render(nb) -> str:
    return HTMLExporter().from_notebook_node(nb)[0]


def test_the_hostile_notebook_would_run_its_scripts_unsanitised():
    """The control: nbconvert's HTML does carry the student's script as it is."""
    page = render(hostile_notebook())
    assert SCRIPT in page and f"{MARK} = 2" in page


def test_outputs_keep_only_escaped_text_and_base64_images():
    nb, _ = SafeOutputs()(hostile_notebook(), {})
    nbformat.validate(nb)
    outputs = nb.cells[0].outputs
    html, js, svg, widget, markdown, bad_png, png, stream, error = outputs
    for o in (html, js, svg, widget, markdown, bad_png, png):
        assert set(o.data) <= {"text/plain", "image/png"} and o.metadata == {}, o
    assert html.data == {"text/plain": "<IPython.core.display.HTML object>"}
    assert js.data == {"text/plain": "<IPython.core.display.Javascript object>"}
    assert widget.data == {"text/plain": "IntSlider(value=0)"}
    assert svg.data["text/plain"].startswith("<svg")           # no text of its own: its source, as text
    assert markdown.data == {"text/plain": f"**bold** {SCRIPT}"}
    assert bad_png.data == {"text/plain": f'"><script>{MARK} = 3</script>'}
    assert png.data == {"image/png": PNG, "text/plain": "<Figure>"}
    assert stream.name == "stdout" and stream.text == "hello\n"
    assert error.ename == "ValueError" and error.traceback == ["ValueError: no"]
    assert "widgets" not in nb.metadata


def test_an_oversized_output_keeps_its_head_and_says_how_much_went(monkeypatch):
    """A cell printing hundreds of megabytes (a red team's: three 400 MB images, a 100 MB
    line) made the autograded notebook 1.3 GB, which formgrader and feedback read whole."""
    from rtp_course.instructor import safe_outputs
    monkeypatch.setattr(safe_outputs, "MAX_OUTPUT", 1000)
    nb = new_notebook(cells=[new_code_cell("x", outputs=[
        new_output("stream", name="stdout", text="y" * 5000),
        new_output("display_data", data={"image/png": "A" * 5000, "text/plain": "<Figure>"}),
        new_output("execute_result", data={"text/plain": "z" * 5000}, execution_count=1),
        new_output("display_data", data={"image/png": PNG})])])
    nb, _ = SafeOutputs()(nb, {})
    nbformat.validate(nb)
    stream, image, text, small = nb.cells[0].outputs
    assert stream.text.startswith("y" * 1000) and "4000 more characters" in stream.text
    assert len(stream.text) < 1200
    assert "image/png" not in image.data and image.data["text/plain"] == "<Figure>"
    assert text.data["text/plain"].startswith("z" * 1000) and len(text.data["text/plain"]) < 1200
    assert small.data == {"image/png": PNG}


def test_the_sanitised_notebook_renders_no_student_script():
    nb, _ = SafeOutputs()(hostile_notebook(), {})
    page = render(nb)
    assert "<script>" + MARK not in page and "<svg" not in page and MARK + " = 2" not in page
    assert 'onerror="' not in page and "RTP_PWNED = 4" not in page
    assert "&lt;script&gt;" + MARK in page                       # shown, escaped
    assert "data:image/png;base64," + PNG in page


def _config(course: Path) -> dict:
    """The course's nbgrader_config.py, loaded in a process of its own (it sets the environment)."""
    code = ("from traitlets.config.loader import PyFileConfigLoader\n"
            "cfg = PyFileConfigLoader('nbgrader_config.py', path='.').load_config()\n"
            "names = lambda ps: [p.__module__ + '.' + p.__name__ for p in ps]\n"
            "print(names(cfg.Autograde.autograde_preprocessors))\n"
            "print(names(cfg.GenerateFeedback.preprocessors))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, RTP_COURSE_GRADING_DIR=str(course)), check=True)
    autograde, feedback = map(eval, r.stdout.strip().splitlines())
    return {"autograde": autograde, "feedback": feedback}


@pytest.mark.extended     # the order; the end-to-end test above holds the outcome
def test_the_course_config_runs_it_after_autograde_executes_and_before_feedback_renders(tmp_path):
    cfg = _config(tmp_path)
    name = "rtp_course.instructor.safe_outputs.SafeOutputs"
    autograde = [n.rsplit(".", 1)[1] for n in cfg["autograde"]]
    assert autograde.index("Execute") < autograde.index("SafeOutputs") < autograde.index("SaveAutoGrades")
    assert name in cfg["feedback"] and cfg["feedback"][-1].endswith("CSSHTMLHeaderPreprocessor")


@pytest.mark.slow
@pytest.mark.extended   # the nbgrader cycle's feedback holds the outcome in the default tier
def test_autograde_and_generate_feedback_show_no_script_of_a_students_output(tmp_path):
    """nbgrader autograde, then generate_feedback, with the course's nbgrader_config.py, of a
    notebook whose cell displays HTML with a script; and generate_feedback of an autograded
    notebook that holds every hostile output (as one autograded before SafeOutputs would)."""
    from nbgrader.api import Gradebook
    course = tmp_path / "course"
    source = course / "source" / "a1"
    source.mkdir(parents=True)
    cell = f"from IPython.display import HTML, display\ndisplay(HTML({SCRIPT!r}))\nHTML({SCRIPT!r})"
    nb = new_notebook(cells=[new_code_cell(cell)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, source / "n1.ipynb")
    env = dict(os.environ, RTP_COURSE_GRADING_DIR=str(course), OMP_NUM_THREADS="1")
    env.pop("RTP_COURSE_IMPL", None)

    def nbgrader(*args):
        r = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    nbgrader("generate_assignment", "a1", "--force")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course") as gb:
        gb.add_student("eve")
    submitted = course / "submitted" / "eve" / "a1"
    submitted.mkdir(parents=True)
    released = nbformat.read(course / "release" / "a1" / "n1.ipynb", as_version=4)
    nbformat.write(released, submitted / "n1.ipynb")
    nbgrader("autograde", "a1", "--student", "eve")
    autograded = course / "autograded" / "eve" / "a1" / "n1.ipynb"
    outputs = nbformat.read(autograded, as_version=4).cells[0].outputs
    assert [o.data for o in outputs] == [{"text/plain": "<IPython.core.display.HTML object>"}] * 2, outputs
    nbgrader("generate_feedback", "a1", "--student", "eve")
    page = (course / "feedback" / "eve" / "a1" / "n1.html").read_text()
    assert "&lt;IPython.core.display.HTML object&gt;" in page and "<script>" + MARK not in page

    hostile = nbformat.read(autograded, as_version=4)
    hostile.cells[0].outputs = hostile_notebook().cells[0].outputs
    nbformat.write(hostile, autograded)
    nbgrader("generate_feedback", "a1", "--student", "eve", "--force")
    page = (course / "feedback" / "eve" / "a1" / "n1.html").read_text()
    assert "&lt;script&gt;" + MARK in page, page[-3000:]
    assert "<script>" + MARK not in page and MARK + " = 2" not in page and "<svg" not in page
