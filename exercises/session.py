"""The judge's side of the trust boundary: the confined processes and the messages to them.

:class:`Zygote` starts ``exercises/runner.py`` in a fresh interpreter that never imports a
hidden test, a reference or the scoring code, and asks it to fork one process per exercise
(:meth:`Zygote.spawn`). :class:`Child` talks to that process: one request, one answer, each
answer checked strictly (its nonce, its size, its fields) -- a made-up or malformed message
ends the exercise with zero; it never reaches the scores. The learner's time is counted while
the judge waits for an answer, not while the judge computes its references.

:func:`protections` says what this machine gives: as root, each submission's processes run
under a uid and gid of their own (the repository, ``exercises/hidden/`` and the report are not
theirs to write, and ``hidden/`` and ``solutions/`` are not theirs to read); not as root they
run as you, and the list says what is missing.
"""
from __future__ import annotations

import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from exercises.runner import (DQ_EXIT, INTERNAL_EXIT, MAX_MESSAGE, RECURSION_EXIT, ProtocolError, dumps, loads,
                              pack, unpack)

RUNNER = Path(__file__).resolve().parent / "runner.py"
ROOT = RUNNER.parents[1]
UID_BASE = 2_000_000_000          # a uid (and gid) per submission: UID_BASE + n, no such user
READY_TIMEOUT = 300.0             # seconds for the zygote to import torch and the library
STATUSES = frozenset({"ok", "raised", "notdone", "exit", "import", "toolarge", "disqualified", "bad"})


class ChildGone(BaseException):
    """The exercise's process is gone or broke the protocol: zero for the exercise.
    status: 'timeout', 'crashed', 'exited', 'output flood', 'protocol error', 'disqualified'."""

    def __init__(self, status: str, reason: str, kind: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.kind = status, reason, kind


def is_root() -> bool:
    return os.geteuid() == 0


def protections() -> tuple[list[str], list[str]]:
    """(what the grader has, what it lacks) on this machine, in words."""
    have = ["each exercise in a fresh process that never imported the hidden tests, the "
            "references or the scoring code; inputs and outputs as data (JSON and raw array bytes)",
            "an audit hook, a profiler and a tracer installed before the submission is imported",
            "resource limits: CPU time, address space, output size, one process (no fork, no thread)",
            "its own session, killed with its process group when the exercise ends, and by the "
            "kernel when the grader dies (PR_SET_PDEATHSIG)",
            "the hidden tests and the grading code checked against exercises/hidden/manifest.json"]
    lack = []
    if is_root():
        have.append("a uid and gid of its own per submission: cannot write the repository or the "
                    "report, read exercises/hidden/ or exercises/solutions/ (mode 0700), or signal "
                    "the grader or another submission")
    else:
        lack = ["not root: the submission runs as your user -- only the audit hook stops it from "
                "reading exercises/hidden/ and exercises/solutions/, writing your files or "
                "signalling the grader; run the grader as root (a container, CI) for the uid drop"]
    if sys.platform != "linux":
        lack.append("not Linux: PR_SET_PDEATHSIG and the per-process limits are Linux features")
    return have, lack


def _read_line(sock, timeout: float) -> dict:
    sock.settimeout(timeout)
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise RuntimeError("the runner process ended")
        buf += chunk
    return loads(buf.strip())


class Zygote:
    """The runner process that preloads the libraries and forks one process per exercise."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.libdir = Path(tempfile.mkdtemp(prefix="vit-scratch-lib-"))
        os.chmod(self.libdir, 0o755)
        os.symlink(ROOT / "vit_scratch", self.libdir / "vit_scratch")
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent",
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
        self.log = self.workdir / "runner.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-B", str(RUNNER), str(theirs.fileno()), str(ROOT), str(self.libdir)],
                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                cwd="/")
        theirs.close()
        self.ready = False
        self.lock = threading.Lock()      # one spawn or reap at a time on the socket

    def wait_ready(self) -> None:
        if self.ready:
            return
        try:
            msg = _read_line(self.sock, READY_TIMEOUT)
        except (OSError, RuntimeError, ValueError) as err:
            raise RuntimeError(f"the runner did not start ({err}): {self._log_tail()}") from None
        if msg.get("ready") is not True:
            raise RuntimeError(f"the runner did not start: {self._log_tail()}")
        self.sock.settimeout(None)
        self.ready = True

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def spawn(self, *, uid, gid, forbid, allow, limits, output_fd) -> "Child":
        with self.lock:
            self.wait_ready()
            req_r, req_w = os.pipe()
            resp_r, resp_w = os.pipe()
            for fd in (req_w, resp_r):
                os.set_inheritable(fd, False)
            try:
                socket.send_fds(self.sock, [dumps({"op": "spawn", "uid": uid, "gid": gid, "forbid": list(forbid),
                                                   "allow": list(allow), "limits": limits}) + b"\n"],
                                [req_r, resp_w, output_fd])
                pid = _read_line(self.sock, 60.0)["pid"]
                self.sock.settimeout(None)
            finally:
                os.close(req_r)
                os.close(resp_w)
        return Child(self, pid, req_w, resp_r)

    def reap(self, pid: int) -> tuple[int, float]:
        """Kill the process group and the process, wait for it: (wait status, CPU seconds)."""
        with self.lock:
            self.sock.sendall(dumps({"op": "reap", "pid": pid}) + b"\n")
            answer = _read_line(self.sock, 60.0)
            self.sock.settimeout(None)
        return answer["status"], float(answer.get("cpu", 0.0))

    def close(self) -> None:
        try:
            self.sock.sendall(dumps({"op": "quit"}) + b"\n")
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()
        try:
            (self.libdir / "vit_scratch").unlink()
            self.libdir.rmdir()
        except OSError:
            pass


class Child:
    """One exercise's process: send a request, get its answer within the time left."""

    def __init__(self, zygote: Zygote, pid: int, req_fd: int, resp_fd: int):
        self.zygote, self.pid = zygote, pid
        self.req_fd, self.resp_fd = req_fd, resp_fd
        os.set_blocking(req_fd, False)
        self.budget = 0.0               # seconds of the learner's time left
        self.status = None              # the raw wait status, once reaped
        self.cpu = 0.0                  # CPU seconds the process used, once reaped

    # -- one exchange
    def request(self, header: dict, blobs=()) -> tuple[dict, list]:
        nonce = secrets.token_hex(16)
        data = pack({**header, "nonce": nonce}, blobs)
        start = time.monotonic()
        try:
            self._write(data, start + self.budget)
            answer = self._read(start + self.budget)
        finally:
            self.budget -= time.monotonic() - start
        try:
            head, got = unpack(answer)
        except ProtocolError as err:
            raise ChildGone("protocol error", f"zero: a malformed message on the grader's channel ({err})") from None
        if head.get("nonce") != nonce:
            raise ChildGone("protocol error", "zero: a message on the grader's channel that the grader did "
                                              "not ask for (never write to file descriptors you did not open)")
        status = head.get("status")
        if status not in STATUSES:
            raise ChildGone("protocol error", "zero: a message with an unknown status on the grader's channel")
        if status == "disqualified":
            kind, detail = head.get("kind"), head.get("detail")
            raise ChildGone("disqualified", "", kind=f"{kind}\0{detail}" if isinstance(kind, str) and
                            isinstance(detail, str) else "internal\0")
        if status == "bad":
            raise RuntimeError(f"the runner refused a request: {head.get('message')}")
        return head, got

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildGone("timeout", "")
            _, ready, _ = select.select([], [self.req_fd], [], min(left, 1.0))
            if ready:
                try:
                    view = view[os.write(self.req_fd, view[:1 << 16]):]
                except BrokenPipeError:
                    raise ChildGone("ended", "") from None
                except BlockingIOError:
                    continue

    def _read_exact(self, n: int, deadline: float) -> bytes:
        parts, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildGone("timeout", "")
            ready, _, _ = select.select([self.resp_fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self.resp_fd, min(n - got, 1 << 20))
            if not chunk:
                raise ChildGone("ended", "")
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def _read(self, deadline: float) -> bytes:
        head = self._read_exact(8, deadline)
        n = int.from_bytes(head, "little")
        if n > MAX_MESSAGE + (8 << 20):
            raise ChildGone("protocol error", f"zero: a message of {n} bytes on the grader's channel "
                                              f"(the limit is {MAX_MESSAGE >> 20} MiB)")
        return self._read_exact(n, deadline)

    # -- the end
    def finish(self) -> int:
        """Kill the process and everything it started; returns its wait status."""
        if self.status is None:
            for fd in (self.req_fd, self.resp_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.status, self.cpu = self.zygote.reap(self.pid)
        return self.status


def describe_end(status: int, time_limit: float, cpu_limit: int) -> tuple[str, str]:
    """(status, feedback) for a process that ended before the exercise did."""
    if status is None or status < 0:
        return "crashed", "zero: the process ended (no status)"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return "timeout", f"zero: used more than {cpu_limit} s of CPU time"
        if sig == signal.SIGXFSZ:
            return "output flood", "zero: printed more than the output limit (output flood); remove the prints"
        if sig == signal.SIGKILL:
            return "crashed", "zero: the process was killed (SIGKILL)"
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return "crashed", f"zero: the process crashed (killed by {name})"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    if code == RECURSION_EXIT:
        return "crashed", ("zero: the code recursed past Python's recursion limit (infinite recursion?); "
                           "the grader's guard cannot follow code that deep")
    if code == DQ_EXIT:
        return "disqualified", "zero: the grader's guard stopped the exercise"
    if code == INTERNAL_EXIT:
        return "crashed", "zero: the grader's guard stopped the process (an error inside the guard)"
    return "exited", (f"zero: the process ended with exit status {code} before the tests finished "
                      "(os._exit()? never exit from an exercise function)")
