"""Load the exercise modules under test from a directory (`--impl PATH`).

Only the exercise modules come from PATH; every other submodule name
(`models`, `launcher`, ...) resolves to the installed `rtp_course`, so a
submission cannot change the infrastructure the checks rely on. The modules
are registered as the package `rtp_impl`, so an exercise's relative import
(`from . import comm`) finds PATH's copy.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
from pathlib import Path

from rtp_course.course import EXERCISES
from rtp_course.course.material import solutions_dir
PACKAGE = "rtp_impl"


class ImplError(ImportError):
    """The implementation directory cannot be used; the message says what to do."""


def resolve(path: str | Path) -> Path:
    """PATH as given, or the known names `rtp_course` / `solutions` resolved to their directories."""
    p = Path(path)
    if not p.exists() and str(path) in ("rtp_course", "solutions"):
        if str(path) == "rtp_course":
            p = Path(__file__).resolve().parents[1]  # rtp_course/
        else:
            p = solutions_dir()
            if p is None:
                raise ImplError("no reference solutions here: they ship only with the instructor "
                                "edition; check your own code with --impl rtp_course")
    p = p.resolve()
    if not p.is_dir():
        raise ImplError(f"--impl {path}: not a directory; give the folder that holds "
                        f"{', '.join(m + '.py' for m in EXERCISES)}")
    if not any((p / f"{m}.py").exists() for m in EXERCISES):
        raise ImplError(f"--impl {path}: none of the exercise modules ({', '.join(EXERCISES)}) "
                        f"is in {p}")
    return p


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(PACKAGE + "."):
            return None
        name = fullname[len(PACKAGE) + 1:]
        if name in EXERCISES:
            file = self.root / f"{name}.py"
            if not file.exists():
                raise ImplError(f"{name}.py is missing from {self.root}")
            return importlib.util.spec_from_file_location(fullname, file)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(f"rtp_course.{name}"))


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self._spec = module.__spec__  # importlib overwrites it with the alias's spec
        return module

    def exec_module(self, module):
        module.__spec__ = self._spec


def load_impl(path: str | Path) -> types.ModuleType:
    """Register `rtp_impl` for PATH (replacing a previous one) and return the package."""
    root = resolve(path)
    for key in [k for k in sys.modules if k == PACKAGE or k.startswith(PACKAGE + ".")]:
        del sys.modules[key]
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
    sys.meta_path.insert(0, _Finder(root))
    pkg = types.ModuleType(PACKAGE)
    pkg.__path__ = []  # a package whose submodules only _Finder provides
    pkg.__file__ = str(root / "__init__.py")
    pkg.IMPL_DIR = root
    sys.modules[PACKAGE] = pkg
    return pkg


def code_files(pkg: types.ModuleType) -> tuple[str, ...]:
    """The files of the code under test: the exercise modules of `pkg` (from load_impl), not
    their directory, which for the default implementation (rtp_course/) holds the given code too."""
    return tuple(str(Path(pkg.IMPL_DIR) / f"{name}.py") for name in EXERCISES)


def exercise(name: str) -> types.ModuleType:
    """Import exercise module `name` from the loaded implementation."""
    if name not in EXERCISES:
        raise ImplError(f"unknown exercise {name!r}: one of {', '.join(EXERCISES)}")
    if PACKAGE not in sys.modules:
        raise ImplError("call load_impl(path) first")
    return importlib.import_module(f"{PACKAGE}.{name}")


def default_impl() -> str:
    """What notebooks and `check()` use when no impl is named: $RTP_COURSE_IMPL, else
    the student's own `rtp_course`. CI runs the notebooks with RTP_COURSE_IMPL=solutions."""
    import os
    return os.environ.get("RTP_COURSE_IMPL", "rtp_course")


def current(name: str) -> types.ModuleType:
    """Exercise module `name` from the default implementation (for notebook demos)."""
    pkg = sys.modules.get(PACKAGE)
    if pkg is None or pkg.IMPL_DIR != resolve(default_impl()):
        load_impl(default_impl())
    return exercise(name)


class _RefuseReference(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "solutions" or fullname.startswith("solutions."):
            raise ImportError("the code under test may not import the reference solutions "
                              "(`solutions`): write your own implementation")
        return None


def refuse_reference_imports() -> None:
    """In a checker worker: make `import solutions` fail for the code under test (the folder can
    be on sys.path when Python starts in the instructor repository; confinement also denies
    reading it by path)."""
    for key in [k for k in sys.modules if k == "solutions" or k.startswith("solutions.")]:
        del sys.modules[key]
    if not any(isinstance(f, _RefuseReference) for f in sys.meta_path):
        sys.meta_path.insert(0, _RefuseReference())
