"""What the scan flags, and why: the names honest exercise code never uses, by kind.

A rule is a dotted name (a module, a function, an attribute) resolved through the file's
imports, with a stable code and the sentence the instructor reads. scan.py walks the file.
"""
from __future__ import annotations

import re

from rtp_course.course import EXERCISES

GRADER = "the grader's own code: an exercise needs only torch, rtp_course.models and its sibling exercises"
INFRA = "the course's infrastructure, which no exercise uses"
STORE = ("a key-value store: a channel between ranks that is no collective, where exercises "
         "communicate through torch.distributed's calls only")
LIFECYCLE = "the grader starts and ends the process group: exercise code only uses it"
FRAMES = ("reads its callers' frames, the grader's variables among them: exercise code uses only "
          "what it is passed")
GC = "walks every live object, the grader's checks included: exercise code uses only the objects it is given"
SOURCE = "reads other code's source or members, the grader's included"
IMPORTS = "Python's import machinery: exercise code imports with plain import statements"
TRACE = "installs a hook that runs on every call in the process, the grader's included"
THREADS = "the process's other threads are the grader's"
RUN_CODE = "runs code made at run time, which no reader nor this scan sees"
MAKE_CODE = "builds functions or modules from raw parts, e.g. to stand in for the grader's"
UNPICKLE = "unpickling runs whatever code the data names"
DYN_IMPORT = ("an import by a name computed at run time, hidden from a reader: exercise code uses "
              "import statements")
DECODE = "decodes hidden data or code: exercise code has nothing to hide"
NATIVE = "native code or raw memory, out of the sight of Python and of the grader"
PROCESS = "processes, signals or exits of its own: exercise code only computes and calls torch.distributed"
NETWORK = "a network channel of its own, beside torch.distributed"
FILE_ATTRS = "changes a file's metadata or permissions: exercise code writes no file"
LOW_FILES = ("low-level file and descriptor operations, on the grader's open files too: exercise code "
             "writes no file")
OUTSIDE = ("a path outside the working directory, such as the installation, /proc or home: exercise "
           "code reads and writes no file")
ENVIRON = "changes the environment that the grader and its later processes read"
MEASURE = "resets the memory statistics the grader measures with"
TORCH_C = "torch's C++ bindings and dispatch internals: exercise code uses torch's Python API"
C10D_C = ("the C++ bindings behind torch.distributed: calls through them bypass the functions the "
          "grader observes")
INTERCEPT = "intercepts torch's operations process-wide, the grader's included"
HOOKS = ("runs code of its own when the grader's machinery acts (an object freed, an error "
         "reported, a fork, a pickle): exercise code runs only when it is called")
BY_NAME = ("reaches attributes by names held in strings, out of a reader's and this scan's sight: "
           "exercise code names what it uses")
PATCH = ("changes a module or class the grader uses too: exercise code calls torch and its "
         "modules, never rewrites them")


def _rules(names: str, code: str, why: str) -> dict:
    return {n: (code, why) for n in names.split()}


RULES = {
    **_rules("torch.distributed.distributed_c10d", "torch-dist-internals",
             "torch.distributed's internal module, which holds the launch's store and default group: "
             "exercise code uses the public torch.distributed API"),
    **_rules("torch.distributed.rendezvous", "torch-dist-internals",
             "how the launch's processes met: " + LIFECYCLE),
    **_rules("torch.distributed.Store torch.distributed.TCPStore torch.distributed.FileStore "
             "torch.distributed.HashStore torch.distributed.PrefixStore", "torch-dist-internals", STORE),
    **_rules("torch.distributed.init_process_group torch.distributed.destroy_process_group "
             "torch.distributed.Backend.register_backend", "torch-dist-internals", LIFECYCLE),
    **_rules("torch._C._distributed_c10d torch.ops.c10d torch.ops._c10d_functional",
             "torch-dist-internals", C10D_C),
    **_rules("torch._C torch.utils._python_dispatch torch._dispatch torch.library", "torch-internals",
             TORCH_C),
    **_rules("torch.overrides.TorchFunctionMode torch.Tensor._make_subclass "
             "torch.Tensor._make_wrapper_subclass", "torch-internals", INTERCEPT),
    **_rules("torch.utils.cpp_extension ctypes _ctypes cffi mmap", "native-code", NATIVE),
    **_rules("torch.cuda.reset_peak_memory_stats torch.cuda.reset_max_memory_allocated "
             "torch.cuda.reset_max_memory_cached torch.cuda.reset_accumulated_memory_stats "
             "torch.cuda.memory._record_memory_history", "measurement", MEASURE),
    **_rules("sys._getframe sys._current_frames inspect.currentframe inspect.stack inspect.trace "
             "inspect.getouterframes inspect.getinnerframes inspect.getframeinfo traceback.extract_stack "
             "traceback.walk_stack traceback.format_stack traceback.print_stack traceback.walk_tb",
             "introspection", FRAMES),
    **_rules("gc.get_objects gc.get_referrers gc.get_referents gc.garbage gc.callbacks", "introspection", GC),
    **_rules("inspect.getsource inspect.getsourcelines inspect.getsourcefile inspect.getfile "
             "inspect.getmodule inspect.getclosurevars inspect.getmembers", "introspection", SOURCE),
    **_rules("inspect.unwrap", "introspection",
             "unwraps a function to the original behind the grader's wrapper"),
    **_rules("sys.modules", "introspection",
             "Python's table of loaded modules, the grader's included: exercise code imports what it uses"),
    **_rules("sys.meta_path sys.path_hooks sys.path_importer_cache sys.path "
             "importlib.util.spec_from_file_location importlib.util.module_from_spec "
             "importlib.util.spec_from_loader importlib.machinery importlib.abc runpy zipimport imp "
             "pkgutil site", "import-system", IMPORTS),
    **_rules("sys.settrace sys.setprofile sys.gettrace sys.getprofile sys.addaudithook sys.monitoring "
             "threading.settrace threading.setprofile threading.settrace_all_threads "
             "threading.setprofile_all_threads bdb pdb profile cProfile trace faulthandler "
             "tracemalloc", "tracing", TRACE),
    **_rules("inspect.getargvalues inspect.getgeneratorlocals inspect.getcoroutinelocals "
             "inspect.getasyncgenlocals asyncio.all_tasks asyncio.Task.get_stack",
             "introspection", FRAMES),
    **_rules("weakref.finalize copyreg sys.excepthook sys.unraisablehook sys.displayhook "
             "sys.breakpointhook sys.set_asyncgen_hooks threading.excepthook os.register_at_fork",
             "hooks", HOOKS),
    **_rules("operator.attrgetter operator.methodcaller", "introspection", BY_NAME),
    **_rules("threading.enumerate _thread", "process", THREADS),
    **_rules("builtins.exec builtins.eval builtins.compile", "dynamic-code", RUN_CODE),
    **_rules("types.FunctionType types.LambdaType types.CodeType types.ModuleType marshal",
             "dynamic-code", MAKE_CODE),
    **_rules("pickle.loads pickle.load pickle.Unpickler _pickle dill cloudpickle shelve", "dynamic-code",
             UNPICKLE),
    **_rules("importlib.reload", "dynamic-code",
             "re-runs a module's code, e.g. a freshly patched one of the grader's or torch's"),
    **_rules("builtins.__import__ importlib.import_module importlib.__import__", "dynamic-import",
             DYN_IMPORT),
    **_rules("base64.b64decode base64.b32decode base64.b16decode base64.b85decode base64.a85decode "
             "base64.decodebytes base64.urlsafe_b64decode base64.standard_b64decode binascii zlib.decompress "
             "bz2.decompress lzma.decompress gzip.decompress codecs.decode builtins.bytes.fromhex",
             "obfuscation", DECODE),
    **_rules("subprocess multiprocessing _posixsubprocess posix pty signal atexit resource fcntl "
             "termios tty asyncio.create_subprocess_exec asyncio.create_subprocess_shell sys.exit "
             "os.fork os.forkpty os.system os.popen os.execl os.execle os.execlp os.execlpe os.execv "
             "os.execve os.execvp os.execvpe os.spawnl os.spawnle os.spawnlp os.spawnlpe os.spawnv "
             "os.spawnve os.spawnvp os.spawnvpe os.posix_spawn os.posix_spawnp os.kill os.killpg "
             "os._exit os.abort os.setsid os.setpgid os.getppid os.pidfd_open", "process", PROCESS),
    **_rules("socket socketserver select selectors ssl http urllib.request asyncio.open_connection",
             "network", NETWORK),
    **_rules("os.setxattr os.getxattr os.listxattr os.removexattr os.chmod os.lchmod os.fchmod os.chown "
             "os.lchown os.fchown os.utime os.chflags os.lchflags shutil.chown", "file-attrs", FILE_ATTRS),
    **_rules("os.write os.pwrite os.writev os.pwritev os.dup os.dup2 os.readlink os.symlink os.link "
             "os.memfd_create os.mkfifo os.mknod os.chdir os.chroot os.truncate os.ftruncate "
             "os.fdopen os.sendfile os.splice os.copy_file_range os.posix_fallocate io.FileIO "
             "io.open_code _io", "files", LOW_FILES),
    **_rules("os.sched_setscheduler os.sched_setaffinity os.sched_setparam os.setpriority os.nice",
             "process", "changes how its process is scheduled, which the grader measures: "
                        "exercise code only computes and calls torch.distributed"),
    **_rules("pathlib.Path.home os.path.expanduser os.path.expandvars", "outside-path", OUTSIDE),
    **_rules("pydoc", "dynamic-import", DYN_IMPORT),
    **_rules("dis", "introspection", "disassembles code, the grader's checks included: exercise code "
             "only calls functions"),
    **_rules("importlib", "dynamic-import", DYN_IMPORT),
    **_rules("os.putenv os.unsetenv", "environment", ENVIRON),
}

# Attribute names that nothing honest reads, on whatever object (the object is often unknown).
ATTRS = {
    **_rules("f_back f_globals f_locals f_code f_builtins f_trace tb_frame tb_next gi_frame gi_code "
             "cr_frame ag_frame", "introspection", FRAMES),
    **_rules("co_filename co_name co_consts co_names co_varnames co_code", "introspection",
             "a code object's internals, which tell the grader's functions apart: exercise code "
             "only calls functions"),
    **_rules("__globals__ __code__ __closure__", "introspection",
             "a function's internals, another module's globals, code or captured variables: "
             "exercise code only calls functions"),
    **_rules("__subclasses__", "introspection",
             "lists every subclass loaded, the grader's included: exercise code names its classes"),
    **_rules("__builtins__", "builtins",
             "Python's builtins, shared with the grader: a change is the grader's too"),
    **_rules("__wrapped__", "introspection",
             "the original behind a wrapper, where the grader wraps what it observes: exercise "
             "code calls functions as they are"),
    **_rules("_get_default_store _get_default_group get_group_store _pg_map pg_map _pg_names "
             "_pg_group_ranks", "torch-dist-internals",
             "torch.distributed's internal state, the launch's store and groups: exercise code uses "
             "the public API"),
    **_rules("locate __module__", "dynamic-import",
             "finds a module by a name taken from an object (pydoc.locate, type(x).__module__): "
             "exercise code imports the modules it uses"),
    **_rules("exec_module load_module", "dynamic-code", RUN_CODE),
    **_rules("__traceback__ _getframe currentframe _current_frames", "introspection", FRAMES),
    **_rules("get_objects get_referrers get_referents", "introspection", GC),
    **_rules("__import__", "dynamic-import", DYN_IMPORT),
    **_rules("chmod lchmod fchmod chown lchown fchown utime setxattr removexattr chflags", "file-attrs",
             FILE_ATTRS),
    **_rules("kill killpg", "process", PROCESS),
    **_rules("settrace setprofile addaudithook", "tracing", TRACE),
    # A check's parent-side methods (registry.PARENT_SIDE) and the worker's record functions.
    **_rules("expected comm_rules expected_rank serial_trace record_value", "grader-names",
             "a method of the grader's checks: exercise code never meets a check"),
}
GRADER_NAMES = {k for k, (code, _) in ATTRS.items() if code == "grader-names"}
# A string equal to one of these names an attribute the rules flag (operator.attrgetter("f_back"),
# obj.__getattribute__("_getframe")): the names that no honest string equals.
STRING_NAMES = {**ATTRS, **{q.rsplit(".", 1)[1]: hit for q, hit in RULES.items() if "." in q and (
    q.rsplit(".", 1)[1].startswith("_") or q.rsplit(".", 1)[1] in (
        "distributed_c10d get_objects get_referrers get_referents settrace setprofile addaudithook "
        "setxattr TCPStore PrefixStore HashStore FileStore reset_peak_memory_stats".split()))}}
# Defining these makes a tensor type that intercepts torch's operations on it, the grader's
# comparisons of what the code returned included.
INTERCEPTORS = {"__torch_function__", "__torch_dispatch__"}
# Classes of the checker's core, compared by name after finding objects through gc.
GRADER_CLASSES = {"Ctx", "Status", "Check", "CommRule", "Bound", "ExitCalled", "Budgets", "ComputeMarks",
                  "Watchdog", "Expectations"}
# ProcessGroup's private C++ methods, which reach past its public ones (those communicating,
# pg.allreduce & co., are recorded as the operation they perform: runtime/commlog/api.PG_OWN).
PG_METHODS = set("_start_coalescing _end_coalescing _get_backend _register_backend "
                 "_set_default_backend".split())

# Private parts of torch.distributed that honest code may use, and which of their names: the
# functional collectives are DTensor's API (tests/correct/comm/functional_collectives.py),
# those commlog records (commlog.api.FUNCOL; DIST_PRIVATE_NAMES) and their waits; any other
# name of the module (its implementation module, its ops' helpers) is flagged.
DIST_PRIVATE_OK = {"_functional_collectives"}
FUNCOL_WAITS = {"wait_tensor", "AsyncCollectiveTensor"}
FUNCOL_OTHER = ("a part of torch's functional collectives other than the collectives the grader records (its "
                "implementation, its ops' helpers): exercise code calls the collectives themselves")


def dist_private_names(module: str) -> set:
    """The names of the private module `module` of torch.distributed that exercise code may
    use (commlog's recorded functional collectives, asked when a file names the module)."""
    from rtp_course.runtime.commlog.api import FUNCOL
    return set(FUNCOL) | FUNCOL_WAITS if module == "_functional_collectives" else set()
# Module settings that exercise code may legitimately assign (documented flags, no behaviour swap).
ASSIGN_OK = ("torch.backends.",)
# rtp_course subpackages an exercise may import; rtp_impl is the name grading loads them under
# (course/impl.py), whose other submodules alias the installed rtp_course.
COURSE_OK = {"models", *EXERCISES}
COURSE_ROOTS = ("rtp_course", "rtp_impl")
GRADER_PARTS = {"checker", "runtime", "confinement", "instructor", "cli", "cluster", "review"}
ENV_MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}
GLOBALS_MUTATORS = ENV_MUTATORS
# Calls whose first arguments are paths: an absolute constant there leaves the working directory.
PATH_ROOTS = {"os", "shutil", "pathlib", "glob", "io"}
PATH_FUNCS = {"builtins.open", "torch.save", "torch.load"}
PATH_METHODS = {"open", "write_text", "write_bytes", "read_text", "read_bytes", "joinpath"}
PATH_RE = re.compile(r"(/|~/?|\.\./)[\w.~-]")
MODULE_RE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+")

# Modules that other modules hold as an attribute (torch.sys, numpy.os, a module's .gc): reached
# so they hide from a reader, and the scan reads `torch.sys.modules` as `sys.modules`.
REEXPORTED = set("sys os gc inspect builtins importlib traceback ctypes _ctypes subprocess marshal "
                 "pickle threading _thread signal socket shutil posix runpy types".split())
HIDDEN_MODULE = ("a module reached as another module's attribute, hidden from a reader and from "
                 "the imports: exercise code imports the modules it uses")
GRADER_STRING = re.compile(r"rtp_(course|impl)[./](checker|runtime|confinement|instructor|cli|cluster|"
                           r"review)\b|rtp_hidden|tests[./]hidden|commlog|(^|[./])solutions([./]|$)")
GRADER_STRING_WHY = ("the grader's modules, its hidden checks or the instructor's solutions: exercise "
                     "code never names them")
ENVIRON_WHY = ("the process's environment by name, which holds the grader's start-up environment "
               "(/proc/self/environ): exercise code reads only the variables the course documents")


def match(q: str):
    """(code, why) of the rule for the qualified name `q`, or None."""
    parts = q.split(".")
    if parts[0] in COURSE_ROOTS and len(parts) > 1 and parts[1] not in COURSE_OK:
        return "grader-import", GRADER if parts[1] in GRADER_PARTS else INFRA
    if parts[0] in ("solutions", "tests"):
        return "grader-import", "the instructor's solutions and tests, which are not the exercise's"
    if any(p == "hidden" or p.startswith("hidden_check") for p in parts):   # not hidden_dim
        return "grader-import", "the grader's hidden checks"
    for i in range(len(parts), 0, -1):
        hit = RULES.get(".".join(parts[:i]))
        if hit:
            return hit
    if parts[:2] == ["torch", "distributed"]:
        private = [i for i, p in enumerate(parts[2:], 2) if p.startswith("_")
                   and not p.startswith("__")]
        if private and parts[private[0]] not in DIST_PRIVATE_OK:
            return "torch-dist-internals", ("a private part of torch.distributed, its internals rather "
                                            "than its API: exercise code uses the public API")
        if private and len(parts) > private[0] + 1 and \
                parts[private[0] + 1] not in dist_private_names(parts[private[0]]):
            return "torch-dist-internals", FUNCOL_OTHER
    return None


def judge_string(s: str, built: bool):
    """(code, why) when the string names what the rules flag (an attribute, a module of the
    grader's, /proc, the environment ...); `built`: made from pieces, where a plain module name
    ("gc", "rtp_course") is already a disguise. None for any other string."""
    s = s.strip()
    if not s or len(s) > 200 or any(c.isspace() for c in s):
        return None                                 # a message or a docstring, not a name
    if s in STRING_NAMES:
        return STRING_NAMES[s]
    if MODULE_RE.fullmatch(s) and match(s):
        return match(s)
    if GRADER_STRING.search(s) or ("/" in s and "hidden" in s.split("/")):
        return "grader-import", GRADER_STRING_WHY
    if re.match(r"/(proc|sys)(/|$)", s):
        return "outside-path", OUTSIDE
    if "environ" in s:
        return "environment", ENVIRON_WHY
    if re.fullmatch(r"\S*\.pth", s):
        return "outside-path", ("a .pth file, which Python runs at every start-up: exercise code "
                                "writes no file")
    if built and s in GRADER_CLASSES:
        return "grader-names", "the name of a class of the grader's: exercise code never meets its objects"
    if built and (s in REEXPORTED or s in COURSE_ROOTS or s in RULES or f"builtins.{s}" in RULES):
        return "obfuscation", "a module's name built from pieces, hidden from a reader and from the imports"
    return None
