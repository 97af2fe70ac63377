"""The grader's manifest covers the Python installation's site directories: a .pth file or a
sitecustomize written there would run in every later grading of every student."""
import pytest

from rtp_course.instructor import manifest


@pytest.fixture
def site(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("# torch\n")
    (site / "distutils-precedence.pth").write_text("import os\n")
    monkeypatch.setattr(manifest, "site_dirs", lambda: [site])
    return site


@pytest.mark.parametrize("tamper, says", [
    (lambda site: (site / "zz-grader-hook.pth").write_text("import evil\n"), "added:   site:"),
    (lambda site: (site / "sitecustomize.py").write_text("import evil\n"), "added:   site:"),
    (lambda site: (site / "distutils-precedence.pth").write_text("import evil\n"), "changed: site:"),
    (lambda site: (site / "torch" / "__init__.py").write_text("# torch, patched\n"), "changed: site:"),
])
def test_a_change_in_site_packages_stops_grading(site, tmp_path, tamper, says):
    manifest.seal(tmp_path)
    assert manifest.verify(tmp_path) > 3
    tamper(site)
    with pytest.raises(manifest.AlteredGrader) as e:
        manifest.verify(tmp_path)
    assert says in str(e.value) and str(site) in str(e.value), str(e.value)
