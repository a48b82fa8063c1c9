"""The checks inside a sandboxed exercise: what the operating system cannot say.

The sandbox decides what the exercise's process can reach, and absence what it can call: the
library functions and the packages an exercise may not use are not in its view at all
(:mod:`.absent`). What is left to this process is about the learner's own code:

* **the loop rule** -- :func:`count_steps` counts the bytecode instructions that the learner's
  own code runs during one call (``sys.settrace`` with opcode events); the judge compares two
  sizes of one axis;
* **no tricks against it** -- the audit hook (:func:`audit_hook`; PEP 578 hooks cannot be
  removed) disqualifies, in the learner's code and in what it calls, what could reach the count
  or change code behind the judge's back: frames, the garbage collector's object lists, code
  objects, compiling or running new code, tracers and profilers, ctypes; and, for a clear
  zero, what the sandbox holds in anyway: writing files, processes, signals, the network.

**Where the state lives.** Nowhere a submission can reach through closures, frames or the
garbage collector. The hook's flags live in its closure, and nothing but the interpreter holds
the hook (there is no getter for audit hooks; frames and the collector's lists are behind the
hook itself). The step counter is an :func:`itertools.count`, which can only go up, held in the
tracer's defaults (setting ``__defaults__`` is audited); ``sys.gettrace`` and
``sys.getprofile`` answer None. :func:`harden` removes what would hand out a frame or a second
copy of a built-in module: the functions that install signal handlers (a handler receives the
interrupted frame) and ``_imp.create_builtin``; the hook refuses an extension module that is
not one of the installed packages' or that would be a second copy of a built-in module
(``_signal`` out of ``libpython``). It also removes the functions that start a thread or a
process with no audit event to announce it (a thread would run untraced; as root, the kernel's
one-process limit does not count uid 0's processes); ``tracemalloc`` (the memory check's) and
the grader's own modules leave ``sys.modules``. None of these modules defines a class with a
method, so no function of the grader is reachable from ``object.__subclasses__()``.

An in-process check cannot be proven complete; nothing of a score depends on this file but the
loop parts and the disqualifications.
"""
from __future__ import annotations

import itertools
import os
import sys
import types

DQ_EXIT, RECURSION_EXIT, INTERNAL_EXIT = 85, 86, 87  # how the process ends when a rule stops it
_OWN, _LEARNER, _LIBRARY, _STDLIB = 0, 1, 2, 3    # whose code a frame runs

# Modules a submission may not import (they reach frames, memory or the guard, or start processes).
BLOCKED_IMPORTS = frozenset({
    "ctypes", "_ctypes", "cffi", "_cffi_backend", "_lsprof", "cProfile", "profile", "pdb", "bdb",
    "trace", "faulthandler", "_testcapi", "_testinternalcapi", "_testbuffer", "_testmultiphase",
    "_xxsubinterpreters", "_xxinterpchannels", "_posixsubprocess", "subprocess", "multiprocessing",
    "_multiprocessing", "_posixshmem", "concurrent", "pty", "socket", "_socket", "ssl", "asyncio",
    "mmap", "resource", "tracemalloc", "_tracemalloc", "code", "codeop", "sqlite3", "_sqlite3"})
_WRITE_EVENTS = frozenset({"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                           "os.link", "os.symlink", "os.truncate", "os.utime", "os.chflags",
                           "os.lchflags", "os.setxattr", "os.removexattr", "os.mkfifo", "os.mknod",
                           "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree",
                           "shutil.rmtree", "shutil.move", "shutil.chown", "shutil.make_archive",
                           "shutil.unpack_archive", "tempfile.mkstemp", "tempfile.mkdtemp",
                           "sqlite3.connect", "sqlite3.connect/handle", "mmap.__new__"})
_PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
                             "subprocess.Popen", "os.startfile", "pty.spawn", "os.setsid",
                             "_thread.start_new_thread"})
_SIGNAL_EVENTS = frozenset({"os.kill", "os.killpg", "signal.pthread_kill"})
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
_CODE_ATTRS = frozenset({"__code__", "gi_code", "cr_code", "ag_code"})
_PROTECTED_ATTRS = _CODE_ATTRS | {"__globals__", "__closure__", "__builtins__", "__defaults__", "__kwdefaults__"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Modules taken out of sys.modules: the grader's own, and those whose use no audit event shows
# (tracemalloc could fake the memory check's peak; the rest re-import under the audit hook).
_UNREACHABLE = frozenset({"exercises", "tracemalloc", "_tracemalloc", "_posixshmem", "multiprocessing.shared_memory",
                          "faulthandler", "_lsprof", "cProfile"})
_SIGNAL_FUNCTIONS = ("signal", "setitimer", "alarm", "pthread_kill", "pthread_sigmask", "siginterrupt",
                     "set_wakeup_fd", "raise_signal", "sigwait", "sigwaitinfo", "sigtimedwait",
                     "pidfd_send_signal")


def code_objects(code, into: dict) -> None:
    """``code`` and every code object nested in its constants, by id (kept alive in ``into``)."""
    stack = [code]
    while stack:
        c = stack.pop()
        if id(c) in into:
            continue
        into[id(c)] = c
        stack.extend(k for k in c.co_consts if type(k) is type(c))


def module_codes(modules) -> dict:
    """The code objects of every function defined in ``modules`` (this grader's own code)."""
    found = {}
    for mod in modules:
        for value in list(vars(mod).values()):
            code = getattr(value, "__code__", None)
            if type(code) is types.CodeType:
                code_objects(code, found)
    return found


def audit_hook(*, learner_dirs, library_dirs, stdlib_dirs, own_codes, send_dq, exit_now, protocol_fds):
    """The audit hook of an exercise's process (to pass to ``sys.addaudithook``).

    Walking the stack down from where an event was raised, each frame is the learner's (a file
    under ``learner_dirs``, or code from nowhere known), a library's (``library_dirs``: the
    installed packages and the library's view), the standard library's (``stdlib_dirs``) or the
    grader's own (``own_codes``, where the walk stops). An event is the learner's when a frame
    of the learner's comes before one of the grader's; then the rules apply. While a library
    module is being imported on the way (its module code is on the stack), that library may
    compile and run new code, read its caller's frame, build code objects and import what a
    submission may not (it builds its dataclasses, its thread pool); the learner's code may
    not. ``send_dq(kind, detail)`` reports a disqualification before ``exit_now(status)`` ends
    the process.
    """
    getframe, recursion_limit = sys._getframe, sys.getrecursionlimit
    learner, library, stdlib = tuple(learner_dirs), tuple(library_dirs), tuple(stdlib_dirs)
    known = learner + library + stdlib
    builtins = frozenset(sys.builtin_module_names)
    own = frozenset(own_codes)
    fds = frozenset(protocol_fds)
    busy, last_pyc = [False], [None]

    def kind(code):
        if id(code) in own:
            return _OWN
        fn = code.co_filename
        if type(fn) is not str or fn.startswith(learner):
            return _LEARNER
        if fn.startswith(library):
            return _LIBRARY
        if fn.startswith(stdlib) or fn.startswith("<frozen "):
            return _STDLIB
        return _LEARNER                                 # code from nowhere counts as the learner's

    def chain(frame):
        """(the event is the learner's, the learner's own code raised it, a library module is
        being imported between the two)."""
        top, importing = True, False
        while frame is not None:
            code = frame.f_code
            k = kind(code)
            if k == _OWN:
                return False, False, False
            if k == _LEARNER:
                return True, top, importing
            importing = importing or (k == _LIBRARY and code.co_name == "<module>")
            top = False
            frame = frame.f_back
        return False, False, False

    def depth(frame):
        n = 0
        while frame is not None:
            n, frame = n + 1, frame.f_back
        return n

    def file_bytes(path):
        if type(path) is not str or not path.startswith(known):
            return None
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError:
            return None

    def dq(kind_, detail):
        try:
            send_dq(kind_, str(detail)[:200])
        finally:
            exit_now(DQ_EXIT)

    def rules(event, args, frame, direct, importing):
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if (type(mode) is str and any(c in mode for c in "wax+")) or (type(flags) is int and flags & _WRITE_FLAGS):
                dq("write", f"open({path!r}, {mode!r})" if type(path) in (str, int) else "open(...) for writing")
            if type(path) is int and path in fds:
                dq("channel", f"open({path})")
            return
        if event in ("sys.setprofile", "sys.settrace"):
            if depth(frame) > recursion_limit() - 100:
                exit_now(RECURSION_EXIT)                # CPython unhooks a tracer that hit the limit
            dq("tracer", event)
        if event in ("sys._current_frames", "sys.addaudithook", "sys.setrecursionlimit", "setopencodehook"):
            dq("tracer", event)
        if event == "sys._getframe":
            if not importing:
                dq("frames", "sys._getframe")
            return
        if event == "object.__getattr__":
            name = args[1] if len(args) > 1 else ""
            if name in _FRAME_ATTRS:
                dq("frames", f".{name}")
            if name in _CODE_ATTRS and direct:
                dq("code", f".{name}")
            return
        if event in ("object.__setattr__", "object.__delattr__"):
            name = args[1] if len(args) > 1 else ""
            if not importing and name in _PROTECTED_ATTRS:
                dq("code", f"sets .{name}")
            return
        if event in ("code.__new__", "function.__new__", "code.replace"):
            if not importing:
                dq("code", event)
            return
        if event == "compile":
            source, filename = (tuple(args) + (None, None))[:2]
            if type(filename) is str and filename.startswith(known):
                data = file_bytes(filename)               # code that says it comes from a file must
                text = source if type(source) is bytes else source.encode() if type(source) is str else None
                if data is None or text != data:        # be that file's
                    dq("compile", f"compile(..., {filename[:60]!r})")
            elif not importing:
                dq("compile", f"compile(..., {filename[:60]!r})" if type(filename) is str else "compile(...)")
            return
        if event == "exec":
            code = args[0] if args else None
            if type(code) is types.CodeType and code.co_name == "<module>" and code.co_filename.startswith(known):
                return                                  # importing a module from a file
            if not importing:
                dq("compile", "exec/eval of new code")
            return
        if event in ("marshal.loads", "marshal.load"):
            data, pyc = (args[0] if args else None), last_pyc[0]
            whole = file_bytes(pyc) if pyc else None
            if type(data) is bytes and whole is not None and whole[16:] == data:
                return                                  # importing a module from its bytecode file
            dq("compile", event)
        if event == "import":
            name, path = (tuple(args) + (None, None))[:2]
            if not importing and type(name) is str and name.split(".")[0] in BLOCKED_IMPORTS:
                dq("import", name)                      # a library may load them; their use is audited
            if type(path) is str and type(name) is str and (
                    name.rpartition(".")[2] in builtins or os.path.basename(path).startswith("libpython") or
                    not os.path.realpath(path).startswith(library + stdlib)):
                dq("import", f"{name} from {path}")    # a second copy of a built-in module, or foreign code
            return
        if event in _WRITE_EVENTS:
            dq("write", event)
        if event in _PROCESS_EVENTS:
            dq("process", event)
        if event in _SIGNAL_EVENTS:
            dq("signal", event)
        for prefix, kind_ in (("gc.", "gc"), ("ctypes.", "ctypes"), ("socket.", "network"),
                              ("resource.", "limits"), ("sqlite3.", "write")):
            if event.startswith(prefix):
                dq(kind_, event)

    def hook(event, args):
        if busy[0]:
            return
        busy[0] = True
        try:
            if event == "open" and args and type(args[0]) is str and args[0].endswith(".pyc"):
                last_pyc[0] = args[0]
            frame = getframe(1)
            mine, direct, importing = chain(frame)
            if mine:
                rules(event, args, frame, direct, importing)
        except BaseException as err:                    # noqa: BLE001 - never leave the hook
            exit_now(RECURSION_EXIT if type(err) is RecursionError else INTERNAL_EXIT)
        finally:
            busy[0] = False

    return hook


def count_steps(run, *, learner_dirs, trusted_dirs) -> int:
    """The bytecode instructions that the learner's own code executes during ``run()``."""
    counter = itertools.count()
    settrace = sys.settrace

    def local(frame, event, arg, _next=None, _self=None):
        if event == "opcode":
            _next()
        return _self

    local.__defaults__ = (counter.__next__, local)

    def trace(frame, event, arg, _local=local, _learner=tuple(learner_dirs), _trusted=tuple(trusted_dirs)):
        if event != "call":
            return None
        fn = frame.f_code.co_filename
        if fn.startswith(_learner) or not (fn.startswith(_trusted) or fn.startswith("<frozen ")):
            frame.f_trace_opcodes = True
            return _local
        return None

    settrace(trace)
    try:
        run()
    finally:
        settrace(None)
    return next(counter)


_REFUSE_SOURCE = """
def refuse(*args, **kwargs):
    raise RuntimeError("can't start a new thread or process: the grader's sandbox runs one of each")
"""


def starters() -> list[tuple[dict, str]]:
    """Where the loaded modules keep the functions that start a thread or a process with no
    audit event (``_thread.start_new_thread``, ``_posixsubprocess.fork_exec`` and the names
    other modules gave them): (a module's globals, the name). Found once, in the zygote."""
    import _thread

    found = [getattr(_thread, n, None) for n in ("start_new_thread", "start_new", "start_joinable_thread")]
    found.append(getattr(sys.modules.get("_posixsubprocess"), "fork_exec", None))
    ids = {id(f) for f in found if f is not None}
    places = []
    for module in list(sys.modules.values()):
        try:
            names = vars(module)
        except TypeError:
            continue
        places += [(names, key) for key, value in list(names.items()) if id(value) in ids]
    return places


def harden(places) -> None:
    """Before the learner's code: take away what would hand out a frame, a second copy of a
    built-in module, a thread or a process that no audit event announces (at ``places``, from
    :func:`starters`), and the grader's own modules (see the module's docstring)."""
    import _imp
    import _signal
    import signal

    sys.gettrace = sys.getprofile = type(None)         # both answer None
    for mod in (signal, _signal):
        for name in _SIGNAL_FUNCTIONS:
            vars(mod).pop(name, None)
    vars(_imp).pop("create_builtin", None)             # every built-in module is imported already
    namespace = {"__builtins__": {"RuntimeError": RuntimeError}}
    exec(_REFUSE_SOURCE, namespace)                    # a function whose globals hold nothing of ours
    for names, key in places:
        names[key] = namespace["refuse"]
    for name in list(sys.modules):
        if name.split(".")[0] in _UNREACHABLE or name in _UNREACHABLE:
            del sys.modules[name]
    sys.modules["__main__"] = types.ModuleType("__main__")
