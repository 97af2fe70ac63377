"""rtp_course.instructor.review.scan: forges are flagged at their line with the right code; honest code
(the references, the stubs, every correct alternative and realistic wrong one) is not."""
import sys
import textwrap
from pathlib import Path

import pytest

from rtp_course.instructor.review.scan import Flag, scan_file, scan_source

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
import wrongs  # noqa: E402  (tests/helpers/wrongs.py: builds tests/correct and tests/wrong entries)
from grading_course import hidden_in_utf7  # noqa: E402


def test_the_scan_sees_the_correct_alternatives_own_edits():
    """The alternatives are not the reference: the one through torch's functional collectives
    imports a private module of torch.distributed (allowed), which the reference does not."""
    src = wrongs.build(ROOT / "tests" / "correct" / "comm" / "functional_collectives.py")
    assert "torch.distributed._functional_collectives" in src
    assert scan_source(src, "comm.py") == []
    assert scan_source(src.replace("_functional_collectives", "_coalescing_manager"), "comm.py")


def forge(code):
    return textwrap.dedent(code).lstrip("\n")


# (name, source, [(line, code) that must be flagged])
FORGES = [
    ("check objects through gc", """
        import gc
        from rtp_course.checker.registry import Check
        for o in gc.get_objects():
            if isinstance(o, Check):
                o.run = lambda ctx: None
        """, [(2, "grader-import"), (3, "introspection")]),
    ("the caller's frame", """
        import sys
        def forward(x):
            check = sys._getframe(1).f_locals["self"]
            return check.expected(2)
        """, [(3, "introspection"), (4, "grader-names")]),
    ("the registry imported", """
        import torch
        import rtp_course.checker.registry
        """, [(2, "grader-import")]),
    ("the launch's store", """
        import torch.distributed as dist
        def forward(x):
            dist.distributed_c10d._get_default_store().set("k", "v")
        """, [(3, "torch-dist-internals")]),
    ("the store, from the internal module", """
        import torch.distributed.distributed_c10d as _c10d
        def forward(x):
            store = _c10d._get_default_store()
            return store.get("x 1")
        """, [(1, "torch-dist-internals"), (3, "torch-dist-internals")]),
    ("funcol's implementation and helpers, past the collectives commlog records", """
        import torch.distributed._functional_collectives as funcol
        def forward(x, group):
            y = funcol.wait_tensor(funcol.all_reduce(x, "sum", group))
            funcol.fun_col_impl._all_reduce(y, "sum", "", [0, 1], 2)
            return funcol.backend_impl(y)
        """, [(4, "torch-dist-internals"), (5, "torch-dist-internals")]),
    ("an extended attribute", """
        import os
        os.setxattr(".", "user.grade", b"100")
        """, [(2, "file-attrs")]),
    ("exec of base64", """
        import base64
        exec(base64.b64decode("cHJpbnQoMSk="))
        """, [(2, "dynamic-code"), (2, "obfuscation")]),
    ("a collective by a computed name", """
        import torch.distributed as dist
        def forward(x):
            getattr(dist, "all_" + "reduce")(x)
            return x
        """, [(3, "dynamic-code")]),
    ("all_reduce monkey-patched", """
        import torch
        def fake(*args, **kwargs):
            return None
        torch.distributed.all_reduce = fake
        """, [(4, "monkey-patch")]),
    ("all_reduce replaced through __setattr__", """
        import torch.distributed as dist
        object.__setattr__(dist, "all_reduce", print)
        dist.__setattr__("all_gather", print)
        """, [(2, "monkey-patch"), (3, "monkey-patch")]),
    ("every collective made to hang", """
        import time as _time
        import torch.distributed as _dist
        for _name in ("all_reduce", "all_gather"):
            setattr(_dist, _name, lambda *a, **k: _time.sleep(1000))
        """, [(4, "monkey-patch"), (4, "dynamic-code")]),
    ("the worker's record replaced", """
        from rtp_course.checker import worker as _worker
        _record = _worker.Ctx.record
        def _forged(ctx, key, tensor):
            _record(ctx, key, tensor)
        _worker.Ctx.record = _forged
        """, [(1, "grader-import"), (5, "monkey-patch")]),
    ("the comm log by name", """
        import importlib
        log = importlib.import_module("rtp_course.runtime.commlog")
        del log.STATE.events[-1]
        """, [(2, "grader-import"), (2, "dynamic-import")]),
    ("gc behind __import__", """
        def forward(x):
            found = __import__("gc").get_objects()
            return x
        """, [(2, "dynamic-import"), (2, "introspection")]),
    ("ctypes", """
        import torch
        import ctypes
        """, [(2, "native-code")]),
    ("a ProcessGroup's private method", """
        import torch.distributed as dist
        def forward(out, group):
            _g = group if group is not None else dist.group.WORLD
            _g._get_backend(out.device).allreduce([out]).wait()
        """, [(4, "torch-dist-internals")]),
    ("the unwrapped collective", """
        import torch.distributed as dist
        def forward(x):
            dist.all_reduce.__wrapped__(x)
        """, [(3, "introspection")]),
    ("a private name from torch.distributed", """
        from torch.distributed import _get_default_group
        import torch.distributed as dist
        world = dist._world
        """, [(1, "torch-dist-internals"), (3, "torch-dist-internals")]),
    ("the status object by its class name", """
        import gc as _gc
        for _o in _gc.get_objects():
            if type(_o).__name__ == 'Status':
                _o.update = lambda **kw: None
        """, [(2, "introspection"), (3, "grader-names")]),
    ("a module from sys.modules", """
        import sys
        ctx = sys.modules["rtp_course.checker.worker"].Ctx
        """, [(2, "introspection"), (2, "grader-import")]),
    ("a check file loaded afresh", """
        import importlib.util as _util
        import rtp_course.checker.public.comm as _loaded
        _spec = _util.spec_from_file_location("_fresh", _loaded.__file__)
        _mod = _util.module_from_spec(_spec)
        _spec.loader.exec_module(_mod)
        """, [(2, "grader-import"), (3, "import-system"), (5, "dynamic-code")]),
    ("a .pth file in site-packages", """
        import os, site
        for d in site.getsitepackages():
            with open(os.path.join(d, "x.pth"), "w") as f:
                f.write("import os")
        """, [(1, "import-system"), (3, "outside-path")]),
    ("secrets from /proc", """
        def forward(x):
            seen = open(f"/proc/{1}/environ", "rb").read()
            return x
        """, [(2, "outside-path")]),
    ("a file in the grader's home", """
        import os as _os
        with open(_os.path.join(_os.environ['HOME'], 'big'), 'wb') as _f:
            _f.write(b'x')
        cache = _os.getenv("HOME") + "/.cache"
        """, [(2, "outside-path"), (4, "outside-path")]),
    ("a detached child process", """
        import subprocess
        subprocess.Popen(["sleep", "1000"], start_new_session=True)
        """, [(1, "process"), (2, "process")]),
    ("the environment changed", """
        import os
        os.environ["RTP_COURSE_CONFINE"] = "0"
        os.environ.update(HOME="/")
        """, [(2, "environment"), (3, "environment")]),
    ("the peak memory reset", """
        import torch
        def forward(x):
            torch.cuda.reset_peak_memory_stats()
            return x
        """, [(3, "measurement")]),
    ("the grader's package by a relative import", """
        from . import comm
        from . import checker
        from ..instructor import solutions_dir
        """, [(2, "grader-import"), (3, "grader-import")]),
    ("the solutions", """
        from solutions.comm import AllReduce
        """, [(1, "grader-import")]),
    ("a trace hook", """
        import sys, threading
        sys.settrace(lambda *a: None)
        threading.settrace(lambda *a: None)
        """, [(2, "tracing"), (3, "tracing")]),
    ("a frame by attrgetter", """
        import operator, inspect
        caller = operator.attrgetter("f_back")(inspect.currentframe())
        """, [(2, "introspection")]),
    ("a tensor that lies to comparisons", """
        import torch
        class Agreeable(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                return True
        """, [(4, "torch-internals")]),
    ("a pickle that runs code", """
        import io, torch
        def forward(x):
            return torch.load(io.BytesIO(b"..."), weights_only=False)
        """, [(3, "dynamic-code")]),
    ("subclasses of object", """
        classes = ().__class__.__bases__[0].__subclasses__()
        """, [(1, "introspection")]),
]


@pytest.mark.parametrize("name", [f[0] for f in FORGES])
def test_a_forge_is_flagged_at_its_line(name):
    _, code, expected = next(f for f in FORGES if f[0] == name)
    flags = scan_source(forge(code), "comm.py")
    got = {(f.line, f.code) for f in flags}
    assert set(expected) <= got, "\n".join(map(str, flags))
    assert all(f.file == "comm.py" and f.reason for f in flags)


def test_the_honest_spellings_of_the_same_things_are_not_flagged():
    """What a forge shares with honest code: setattr with a variable name on a module of the
    model, getattr with a constant, gc.collect, inspect.signature, the exercises' own imports,
    a setting of torch.backends, environment reads, a temporary directory."""
    code = forge("""
        import gc, inspect, os, tempfile
        import torch
        import torch.distributed as dist
        from rtp_course import comm
        from rtp_course.models.layers import attention_forward
        from . import rotation
        def wrap(model, name, child, group):
            setattr(model, name, child)
            weight = getattr(model, f"{name}_proj_weight", None)
            kind = getattr(model, "writes_into", False)
            gc.collect()
            inspect.signature(model.forward)
            torch.backends.cudnn.deterministic = True
            rank = int(os.environ.get("LOCAL_RANK", "0"))
            scratch = tempfile.mkdtemp()
            model.forward = lambda x: x
            object.__setattr__(model, "frozen", True)
            out = torch.zeros(3).gather(0, torch.tensor([0]))
            dist.all_reduce(out, group=group)
            return dist.get_world_size(group), group.size()
        """)
    assert scan_source(code, "flyweight.py") == []


def test_flag_format():
    flags = scan_source("from rtp_course.checker import registry\n", "flyweight.py")
    assert len(flags) == 1
    flag = flags[0]
    assert isinstance(flag, Flag) and flag.code == "grader-import" and flag.line == 1
    assert str(flag).startswith("flyweight.py:1: imports rtp_course.checker (the grader's own code")
    assert flag.as_dict() == {"file": "flyweight.py", "line": 1, "reason": flag.reason,
                              "code": "grader-import"}


def test_a_file_that_does_not_parse_has_no_flag():
    assert scan_source("import ctypes\ndef f(:\n", "comm.py") == []


@pytest.mark.parametrize("source", [
    "x = " + "a+" * 200000 + "a\n", "y = -" + "-" * 100000 + "1\n",
    # deep enough to stop the copy check's normal form, not the parser: a file whose every
    # disguise would then stay in place
    "def pad(x):\n    return " + "x + " * 2000 + "x\n"])
def test_a_deeply_nested_file_is_flagged_not_a_crash(source):
    flags = scan_source(source, "comm.py")
    assert [f.code for f in flags] == ["scan-limit"]
    assert flags[0].reason.startswith("the file could not be scanned: nested too deeply")


def test_the_scan_knows_the_checks_parent_side():
    """The names the scan flags follow the checker's: a method added to PARENT_SIDE (what a
    worker refuses to answer) must be added to the scan's rules too."""
    from rtp_course.checker.registry import PARENT_SIDE
    from rtp_course.instructor.review.scan import GRADER_NAMES
    assert set(PARENT_SIDE) <= GRADER_NAMES


# ---- the red team's evasions (/tmp/rt/attacks: forge_commlog, scan_evasion_gadgets, hidden_exfil) ----
# Each is the essential line of an attack that once ran unflagged; (line, code) must be flagged.
EVASIONS = [
    ("sys.modules as torch.sys.modules (forge_commlog)", """
        import torch
        state = torch.sys.modules["rtp_course" + ".runtime.commlog"].STATE
        """, [(2, "introspection"), (2, "hidden-module"), (2, "grader-import")]),
    ("the module name held in a variable (forge_commlog)", """
        import torch
        _LOG = "rtp_course" + ".runtime.commlog"
        def f():
            return torch.sys.modules[_LOG].STATE.events
        """, [(2, "grader-import"), (4, "grader-import"), (4, "introspection")]),
    ("np.sys, a module's .gc and .inspect", """
        import numpy as np
        import rotation
        mods = np.sys.modules
        objs = rotation.gc.get_referrers(mods)
        frame = rotation.inspect.currentframe()
        """, [(3, "hidden-module"), (3, "introspection"), (4, "hidden-module"), (4, "introspection"),
              (5, "hidden-module"), (5, "introspection")]),
    ("gc from the module table (scan_evasion_gadgets)", """
        import torch
        MODS = torch.sys.modules
        GC = MODS["gc"]
        GO = "get_" + "objects"
        walk = getattr(GC, GO)
        """, [(3, "introspection"), (4, "introspection"), (5, "dynamic-code")]),
    ("frames by names held in variables (scan_evasion_gadgets)", """
        TB, BK, LC = "tb_" + "frame", "f_" + "back", "f_" + "locals"
        def caller_locals():
            try:
                raise ValueError
            except ValueError as e:
                tb = e.__traceback__
            return getattr(getattr(getattr(tb, TB), BK), LC)
        """, [(1, "introspection"), (6, "introspection"), (7, "dynamic-code")]),
    ("getattr with a module-level name that does not fold", """
        NAME = input()
        def f(o):
            return getattr(o, NAME)
        """, [(3, "dynamic-code")]),
    ("the grader's class patched through setattr (scan_evasion_gadgets)", """
        import torch
        WORKER, CTX = "rtp_course" + ".checker.worker", "C" + "tx"
        def patch_grader(name, fn):
            cls = getattr(torch.sys.modules[WORKER], CTX)
            setattr(cls, name, fn)
        """, [(2, "grader-import"), (2, "grader-names"), (4, "grader-import"), (5, "monkey-patch")]),
    ("a Ctx found by a type name held in a variable (scan_evasion_gadgets)", """
        CTX = "C" + "tx"
        def found(objects):
            return [o for o in objects if type(o).__name__ == CTX]
        """, [(3, "grader-names")]),
    ("exec through the builtins module (scan_evasion_gadgets)", """
        import torch
        BI, EXEC = torch.sys.modules["builtins"], "ex" + "ec"
        def run(code):
            getattr(BI, EXEC)(code)
        """, [(2, "obfuscation"), (4, "dynamic-code")]),
    ("chmod, utime and kill through torch.os (scan_evasion_gadgets)", """
        import torch
        def metadata(path):
            torch.os.chmod(path, 0o777)
            torch.os.utime(path, (0, 0))
            kill = torch.os.kill
            kill(torch.os.getpid(), 0)
        """, [(3, "file-attrs"), (3, "hidden-module"), (4, "file-attrs"), (5, "process"), (6, "process")]),
    ("the hidden checks dumped from the module table (hidden_exfil)", """
        import dis as _dis
        import torch as _torch
        for name, mod in list(_torch.sys.modules.items()):
            for k, v in list(vars(mod).items()):
                print(_dis.Bytecode(v).dis())
        """, [(1, "introspection"), (3, "introspection"), (3, "hidden-module"), (4, "introspection"),
              (5, "introspection")]),
    ("names built by join, chr, bytes, f-strings, format and slicing", """
        a = "".join(["rtp_", "course", ".checker"])
        b = "".join(map(chr, [103, 99]))
        c = bytes([116, 98, 95, 102, 114, 97, 109, 101]).decode()
        part = "runtime"
        d = f"rtp_course.{part}.commlog"
        e = "{}_{}".format("f", "globals")
        f = "kcab_f"[::-1]
        g = "%s.%s" % ("rtp_course", "confinement")
        h = "solu" + "tions.comm"
        i = "tests" + ".hidden.rotation"
        j = "rtp_hidden_checks"
        """, [(1, "grader-import"), (2, "obfuscation"), (3, "introspection"), (5, "grader-import"),
              (6, "introspection"), (7, "introspection"), (8, "grader-import"), (9, "grader-import"),
              (10, "grader-import"), (11, "grader-import")]),
    ("/proc, /sys and environ built from pieces", """
        p = "/pr" + "oc/self/maps"
        s = "/sys/" + "fs/cgroup"
        k = "envi" + "ron"
        """, [(1, "outside-path"), (2, "outside-path"), (3, "environment")]),
    ("a module name decoded", """
        import base64, codecs
        m = base64.b64decode("Z2M=").decode()
        n = codecs.decode("s_onpx", "rot13")
        """, [(2, "obfuscation"), (3, "introspection")]),
    ("dynamic code and imports", """
        import torch
        import importlib
        c = compile("1", "x", "eval")
        eval(c)
        g = torch.sys.modules["builtins"].__import__("gc")
        il = torch.importlib
        b = __builtins__
        """, [(2, "dynamic-import"), (3, "dynamic-code"), (4, "dynamic-code"), (5, "dynamic-import"),
              (6, "hidden-module"), (7, "builtins")]),
    ("a function's and a class's internals", """
        def f(fn, ctx, fr):
            g = fn.__globals__, fn.__code__, fn.__closure__
            subs = object.__subclasses__()
            ns = type(ctx).__dict__
            ms = ctx.__class__.__dict__
            up = fr.f_back.f_globals
        """, [(2, "introspection"), (3, "introspection"), (4, "introspection"), (5, "introspection"),
              (6, "introspection")]),
    ("sys._getframe under an alias", """
        import torch
        gf = torch.sys._getframe
        fr = gf(1)
        """, [(2, "introspection"), (3, "introspection")]),
    ("the grader's class and torch.distributed patched by assignment", """
        import torch
        def f(ctx, fn, name):
            type(ctx).record = fn
            ctx.__class__.record = fn
            torch.sys.modules["torch.distributed"].all_reduce = fn
            setattr(torch.sys.modules["torch.distributed"], name, fn)
        """, [(3, "monkey-patch"), (4, "monkey-patch"), (5, "monkey-patch"), (6, "monkey-patch")]),
    ("delattr with a built name", """
        import torch.distributed as dist
        N = "all_" + "gather"
        delattr(dist, N)
        """, [(3, "dynamic-code"), (3, "monkey-patch")]),
    # The second red team's: a module found by a name an object carries. (Its other, a process
    # group's own allgather, is recorded as the all-gather it is: runtime/commlog PG_OWN.)
    ("pydoc.locate of an object's __module__ (depth_switch_rotation)", """
        import pydoc
        def f(handle):
            return pydoc.locate(type(handle).__module__)
        """, [(1, "dynamic-import"), (3, "dynamic-import")]),
    # The fourth red team's: a debugger's frames, descriptors written raw, the scheduler.
    ("a debugger reading the locals of the frames it is handed", """
        import bdb
        import inspect
        class Peek(bdb.Bdb):
            def user_call(self, frame, args):
                return inspect.getargvalues(frame).locals
        """, [(1, "tracing"), (5, "introspection")]),
    ("profilers and tracers", """
        import cProfile, trace, faulthandler
        from pdb import Pdb
        """, [(1, "tracing"), (2, "tracing")]),
    ("raw descriptors and scheduling", """
        import io, os
        io.FileIO(5, "wb", closefd=False).write(b"x")
        os.fdopen(6, "wb")
        os.sendfile(5, 6, 0, 10)
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        """, [(2, "files"), (3, "files"), (4, "files"), (5, "process")]),
    # The fifth round's leftovers: code run by the grader's machinery, names held in strings.
    ("hooks run when an object dies, an error is reported, a fork or a pickle happens", """
        import weakref, copyreg, sys, threading, os
        weakref.finalize(object(), print)
        copyreg.pickle(complex, lambda c: (complex, (0, 0)))
        sys.unraisablehook = threading.excepthook = print
        os.register_at_fork(after_in_child=print)
        """, [(2, "hooks"), (3, "hooks"), (4, "hooks"), (5, "hooks")]),
    ("attributes reached by names held in strings", """
        import operator
        from operator import methodcaller
        def f(dist):
            return operator.attrgetter(dir(dist)[3])(dist), methodcaller("wait")
        """, [(4, "introspection")]),
    ("a descriptor inherited from the worker, opened by its number", """
        import stat, os
        for fd in range(3, 64):
            with open(fd, "wb", closefd=False) as fh:
                fh.write(b"a forged outcome")
        """, [(3, "files")]),
]


@pytest.mark.parametrize("name", [e[0] for e in EVASIONS])
def test_an_evasion_is_flagged_at_its_line(name):
    _, code, expected = next(e for e in EVASIONS if e[0] == name)
    flags = scan_source(forge(code), "rotation.py")
    got = {(f.line, f.code) for f in flags}
    assert set(expected) <= got, "\n".join(map(str, flags))
    assert all(f.file == "rotation.py" and f.reason for f in flags)


@pytest.mark.parametrize("path", sorted(Path("/tmp/rt/attacks").glob("*.py")) if Path("/tmp/rt/attacks").is_dir()
                         else [], ids=lambda p: p.name)
def test_the_red_teams_attack_files_are_flagged(path):
    """Where the red team's files are at hand: each tampering one is flagged (busy_forever only
    burns CPU, env_leak reads /proc, which is flagged)."""
    if path.name == "busy_forever.py":
        pytest.skip("no tampering: it burns CPU time")
    assert scan_source(path.read_text(), "rotation.py")


def test_the_exercises_legitimate_dynamic_spellings_are_not_flagged():
    """setattr(self, name, p) in the file's own class, getattr with a constant or with run-time
    data, module hooks, autograd Functions, functools, math, dataclasses, torch.distributed."""
    code = forge("""
        import functools
        import math
        from dataclasses import dataclass, field
        import torch
        import torch.distributed as dist

        @dataclass
        class Plan:
            sizes: list = field(default_factory=list)

        class _Reduce(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, group):
                ctx.group = group
                return x

            @staticmethod
            def backward(ctx, grad):
                dist.all_reduce(grad, group=ctx.group)
                return grad, None

        class Sharded(torch.nn.Module):
            def __init__(self, params, names):
                super().__init__()
                for name, p in params.items():
                    setattr(self, name, torch.nn.Parameter(p))
                for n in names:
                    self.register_buffer(n, torch.zeros(1))
                    delattr(self, n)
                self.scale = math.sqrt(len(names))
                self.hook = self.register_forward_hook(functools.partial(self._hook, tag="x"))

            def _hook(self, module, inputs, output, tag):
                return output

            def forward(self, x):
                w = getattr(self, "weight", None)
                for name, _ in self.named_parameters():
                    getattr(self, name).requires_grad_(True)
                return _Reduce.apply(x, None) if w is None else x @ w

        def shard(model, group):
            for path, child in list(model.named_modules()):
                leaf = path.rsplit(".", 1)[-1]
                setattr(model.get_submodule(".".join(path.split(".")[:-1])), leaf, child)
                weight = getattr(child, f"{leaf}_weight", None)
            return dist.get_rank(group), type(model).__name__
        """)
    assert scan_source(code, "flyweight.py") == []


def test_the_folding_is_bounded():
    """Strings that would be huge are not built; a cycle of names does not loop."""
    assert scan_source("x = 'a' * 10**9\ny = '%0999999d' % 1\nz = bytes(10**8)\n", "comm.py") == []
    assert scan_source("a = b + 'x'\nb = a + 'y'\n", "comm.py") == []
    doubling = "".join(f"v{i + 1} = v{i} + v{i}\n" for i in range(60))
    assert scan_source("v0 = 'ab'\n" + doubling, "comm.py") == []


@pytest.mark.parametrize("encoding", ["utf-7", "unicode_escape"])
def test_a_file_is_scanned_as_python_decodes_it_and_its_encoding_declaration_flagged(tmp_path, encoding):
    """A `# coding:` line other than UTF-8 made the scan read another file than the one Python
    runs: `import ctypes` hidden in a comment (UTF-7's `+AAo-`, unicode_escape's `\\n` are
    newlines to Python) was never seen. The scan decodes as Python does and flags the line."""
    path = tmp_path / "comm.py"
    if encoding == "utf-7":                 # on line 2, after a shebang
        path.write_bytes(hidden_in_utf7("x = 1", "import ctypes"))
        line = 2
    else:
        path.write_bytes(b"# -*- coding: unicode_escape -*-\nx = 1  # \\nimport ctypes\n")
        line = 1
    got = {(f.line, f.code) for f in scan_file(path)}
    assert (line, "source-encoding") in got and any(code == "native-code" for _, code in got), got
    utf8 = path.read_text(errors="replace").splitlines()
    assert not any("ctypes" in ln.split("#")[0] for ln in utf8)        # as UTF-8: in a comment


def test_honest_files_declare_no_other_encoding(tmp_path):
    """The references and stubs, read from disk as the scan reads a submission: no flag; a
    UTF-8 declaration or byte-order mark is no finding either."""
    for name, source in wrongs.reference_and_stub_sources().items():
        path = tmp_path / Path(name).name
        path.write_text(source)
        assert scan_file(path) == [], name
    for data in (b"# -*- coding: utf-8 -*-\nx = 1\n", b"\xef\xbb\xbfx = 1\n", b"# coding=UTF8\nx = 1\n"):
        path.write_bytes(data)
        assert scan_file(path) == [], data
