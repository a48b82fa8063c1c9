"""The zygote: an interpreter that imported NumPy (and PyTorch) once and forks the process of
every exercise, each inside a bubblewrap sandbox of its own.

The judge starts it (``python -I -B zygote.py FD KIND``, see :mod:`exercises.grader.session`)
and talks to it on a Unix socket, one JSON line per request:

* ``spawn`` -- start ``bwrap`` with the arguments the judge built for this exercise (its view
  of the filesystem, see :mod:`exercises.grader.bubblewrap`), wait until the process inside is
  up, and fork: the fork enters the sandbox and forks once more inside its pid namespace
  (:mod:`.confine`). That grandchild takes its limits, drops every capability and serves the
  judge on the pipes that came with the request (:mod:`.server`); the fork waits for it and ends
  the same way. With no ``bwrap`` in the request (``--trust-submissions``), the fork serves
  itself, with the same limits, on the host's filesystem.
* ``reap`` -- kill the fork and what it started, close the sandbox, answer its wait status and
  CPU time.

KIND says what to import first: ``torch`` (NumPy, PyTorch, einops, ``scipy.special``),
``scipy`` (NumPy, ``scipy.special``) or ``numpy`` (NumPy only), for the exercises that may use
none of the others -- a package an exercise may not use is not even in its zygote's memory. Neither imports the library, a
submission, a hidden test or the scoring code. It runs this folder's files from their source,
each with a private copy of the builtins (:func:`boot`), and its forks take them out of
``sys.modules`` before any learner's code runs.
"""
from __future__ import annotations

import builtins
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import traceback
import types

PACKAGE = "exercises.grader.sandbox"
MODULES = ("wire", "guard", "confine", "server", "zygote")
STDLIB = ("itertools", "functools", "operator", "collections", "typing", "dataclasses", "fractions",
          "statistics", "random", "copy", "string", "re", "time", "enum", "numbers", "decimal", "heapq",
          "bisect", "array", "textwrap", "warnings", "contextlib", "cmath", "math", "importlib.util",
          "importlib.machinery")
READY_TIMEOUT = 30.0        # seconds for a sandbox to come up


def boot() -> None:
    """Load this folder's modules from their source, each with a private copy of the builtins
    (nothing a submission patches reaches them, and no bytecode file is read), then run."""
    control_fd, kind = int(sys.argv[1]), sys.argv[2]
    private = dict(vars(builtins))
    here = os.path.dirname(os.path.abspath(__file__))
    package = types.ModuleType(PACKAGE)
    package.__path__ = [here]
    sys.modules[PACKAGE] = package
    modules = {}
    for name in MODULES:
        path = os.path.join(here, name + ".py")
        with open(path, "rb") as fh:
            code = compile(fh.read(), path, "exec", dont_inherit=True)
        module = types.ModuleType(f"{PACKAGE}.{name}")
        module.__file__, module.__package__, module.__builtins__ = path, PACKAGE, private
        sys.modules[module.__name__] = module
        exec(code, vars(module))
        setattr(package, name, module)
        modules[name] = module
    modules["zygote"].main(control_fd, kind, modules)


def preload(kind: str, blocked) -> object:
    """Import what graded code may use, and run it once so that lazy imports happen here; every
    built-in module too (a fork cannot make new ones). Returns torch, or None."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import numpy as np

    for name in STDLIB + tuple(sorted(sys.builtin_module_names)):
        if name.split(".")[0] not in blocked:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    x = np.linspace(-1, 1, 24).reshape(1, 2, 3, 4)
    np.einsum("bchw,c->bhw", x, np.ones(2))
    np.linalg.norm(x, axis=-1)
    np.lib.stride_tricks.sliding_window_view(x, (2, 2), axis=(2, 3))
    if kind == "numpy":
        return None
    import scipy.special

    scipy.special.erf(x)
    if kind != "torch":
        return None
    import einops
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    einops.rearrange(x, "b c h w -> b (h w) c")
    einops.reduce(x, "b c h w -> b c", "mean")
    t = torch.from_numpy(x).requires_grad_()
    einops.rearrange(t, "b c h w -> b (h w) c")
    m = nn.Sequential(nn.LayerNorm(4, eps=1e-6), nn.Linear(4, 4), nn.GELU(), nn.Dropout(0.0)).double()
    m.load_state_dict(m.state_dict())
    y = m(t).softmax(-1)
    y = y + F.interpolate(t, size=(3, 4), mode="bilinear", align_corners=False)
    y = y + F.conv2d(t, torch.ones(2, 1, 3, 3, dtype=torch.float64), padding=1, groups=2)
    q = t.reshape(1, 2, 3, 4)
    y = y + F.scaled_dot_product_attention(q, q, q)
    y = y + F.layer_norm(t, (4,)) + F.gelu(t) + F.linear(t, torch.ones(4, 4, dtype=torch.float64))
    y.sum().backward()
    with torch.no_grad():
        torch.einsum("bchw,c->bhw", t, torch.ones(2, dtype=torch.float64))
    return torch


def python_dirs() -> tuple[list, list]:
    """(the installed packages' folders, the standard library's), as found and resolved."""
    import site
    import sysconfig

    def both(paths):
        found = set()
        for p in paths:
            if p and os.path.isdir(p):
                found.update({os.path.realpath(p) + os.sep, p.rstrip(os.sep) + os.sep})
        return sorted(found)

    paths = sysconfig.get_paths()
    packages = both([paths["purelib"], paths["platlib"], *site.getsitepackages()])
    return packages, both([paths["stdlib"], paths["platstdlib"], os.path.dirname(os.__file__),
                           os.path.join(paths["platstdlib"], "lib-dynload")])


def main(control_fd: int, kind: str, modules: dict) -> None:
    confine, guard, server = modules["confine"], modules["guard"], modules["server"]
    confine.die_with_parent()
    torch = preload(kind, guard.BLOCKED_IMPORTS)
    own = guard.module_codes(modules.values())
    library_dirs, stdlib_dirs = python_dirs()
    starters = guard.starters()
    sock = socket.socket(fileno=control_fd)
    sock.sendall(json.dumps({"ready": True, "pid": os.getpid()}).encode() + b"\n")
    boxes, buf = {}, b""
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 8)
        if not msg:
            os._exit(0)
        buf += msg
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            if req["op"] == "spawn":
                try:
                    answer = spawn(req, fds, boxes, torch=torch, own=own, modules=modules,
                                   where=(library_dirs, stdlib_dirs, starters))
                except Exception as err:                # noqa: BLE001 - the sandbox did not start
                    answer = {"error": f"{type(err).__name__}: {err}"}
                for fd in fds:
                    os.close(fd)
                fds = []
                sock.sendall(json.dumps(answer).encode() + b"\n")
            elif req["op"] == "reap":
                sock.sendall(json.dumps(reap(req["pid"], boxes)).encode() + b"\n")
            elif req["op"] == "quit":
                for pid in list(boxes):
                    reap(pid, boxes)
                os._exit(0)


def start_box(bwrap: str, args: list) -> tuple:
    """Start bubblewrap; return (its process, the pipe that keeps the sandbox open, the pid of
    its process inside) once that process runs."""
    hold_r, hold_w = os.pipe()
    echo_r, echo_w = os.pipe()
    info_r, info_w = os.pipe()
    args_r, args_w = os.pipe()
    cat = os.path.realpath("/usr/bin/cat" if os.path.exists("/usr/bin/cat") else "/bin/cat")
    options = list(args) + ["--info-fd", str(info_w)]
    os.write(args_w, b"".join(a.encode() + b"\0" for a in options))
    os.close(args_w)
    err = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen([bwrap, "--args", str(args_r), "--", cat], stdin=hold_r, stdout=echo_w, stderr=err,
                                pass_fds=(info_w, args_r), env=_environment(), close_fds=True)
    finally:
        for fd in (hold_r, echo_w, info_w, args_r):
            os.close(fd)
    try:
        info = b""
        while not info.rstrip().endswith(b"}"):
            ready, _, _ = select.select([info_r], [], [], READY_TIMEOUT)
            chunk = os.read(info_r, 4096) if ready else b""
            if not chunk:
                break
            info += chunk
        pid1 = json.loads(info)["child-pid"] if info.rstrip().endswith(b"}") else None
        os.write(hold_w, b"\n")
        ready, _, _ = select.select([echo_r], [], [], READY_TIMEOUT)
        if pid1 is None or not ready or os.read(echo_r, 1) != b"\n":
            proc.kill()
            proc.wait()
            err.seek(0)
            raise RuntimeError("bubblewrap did not start: " + err.read().decode(errors="replace")[-500:].strip())
    except BaseException:
        os.close(hold_w)
        raise
    finally:
        os.close(info_r)
        os.close(echo_r)
        err.close()
    return proc, hold_w, pid1


def _environment() -> dict:
    """bubblewrap's environment (its process inside the sandbox starts with none)."""
    env = {"PATH": "/usr/bin:/bin"}
    if "VIT_SCRATCH_GRADER_RUN" in os.environ:               # the tests find what a run left behind
        env["VIT_SCRATCH_GRADER_RUN"] = os.environ["VIT_SCRATCH_GRADER_RUN"]
    return env


def _close_all_but(keep) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def spawn(req, fds, boxes, *, torch, own, modules, where) -> dict:
    confine, server = modules["confine"], modules["server"]
    box = start_box(req["bwrap"], req["args"]) if req.get("bwrap") else None
    try:
        namespaces = confine.open_namespaces(box[2]) if box else {}
    except OSError:
        _close_box(box)
        raise
    pid = os.fork()
    if pid == 0:
        try:
            _close_all_but(set(fds) | set(namespaces.values()))
            confine.die_with_parent()
            confine.set_core_limit()
            if namespaces:
                confine.enter_outer(namespaces)
            child = os.fork()
            if child == 0:
                confine.die_with_parent()
                os.setsid()
                if namespaces:
                    confine.enter_inner(namespaces)
                confine.redirect(*fds)
                confine.set_limits(req["limits"])
                if namespaces:
                    confine.drop_privileges()
                server.run(req=req, torch=torch, own_codes=own, library_dirs=where[0], stdlib_dirs=where[1],
                           starters=where[2])
                os._exit(0)
            _mirror(child)
        except BaseException:                           # noqa: BLE001 - a bug of the sandbox, not the learner's
            traceback.print_exc()
        finally:
            os._exit(70)
    for fd in namespaces.values():
        os.close(fd)
    boxes[pid] = box
    return {"pid": pid}


def _mirror(child: int) -> None:
    """End the way the child ended (its signal or its exit status), once it has."""
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 70)


def reap(pid: int, boxes: dict) -> dict:
    """Kill the exercise's process and close its sandbox: its wait status and CPU seconds."""
    box = boxes.pop(pid, None)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        _, status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
    except ChildProcessError:
        status, cpu = -1, 0.0
    if box is not None:
        _close_box(box)
    return {"status": status, "cpu": cpu}


def _close_box(box) -> None:
    proc, hold_w, _ = box
    os.close(hold_w)                                    # the sandbox's process ends, and the sandbox
    proc.kill()
    proc.wait()


if __name__ == "__main__":
    boot()
