"""The judge's side of the trust boundary: the zygotes, and the process of each exercise.

:class:`Zygote` starts ``exercises/grader/sandbox/zygote.py`` in a fresh interpreter
(``python -I -B``) that imports NumPy -- and PyTorch, for the ``torch`` kind -- once and never a
hidden test, a reference or the scoring code, and asks it to fork the process of each exercise
inside a bubblewrap sandbox (:meth:`Zygote.spawn`; the sandbox's arguments come from
:mod:`exercises.grader.bubblewrap`). :class:`Child` talks to that process: one request, one
answer, each answer checked strictly (its nonce, its size, its fields) -- a made-up or
malformed message ends the exercise with zero; it never reaches the scores, and nothing the
process sends is reported as an error of the grader. The learner's time is counted while the
judge waits for an answer, not while the judge computes its references; no wait lasts past the
end of its submission's wall budget.
"""
from __future__ import annotations

import math
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from exercises.grader.sandbox.guard import DQ_EXIT, INTERNAL_EXIT, RECURSION_EXIT
from exercises.grader.sandbox.wire import MAX_MESSAGE, ProtocolError, pack, unpack

ZYGOTE = Path(__file__).resolve().parent / "sandbox" / "zygote.py"
READY_TIMEOUT = 300.0             # seconds for a zygote to import PyTorch
STATUSES = frozenset({"ok", "raised", "notdone", "exit", "import", "toolarge", "disqualified"})


class ChildGone(BaseException):
    """The exercise's process is gone or broke the protocol: zero for the exercise.
    status: 'timeout', 'crashed', 'exited', 'output flood', 'protocol error', 'disqualified'."""

    def __init__(self, status: str, reason: str, kind: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.kind = status, reason, kind


def _dumps(obj) -> bytes:
    import json

    return json.dumps(obj).encode()


def _read_line(sock, timeout: float) -> dict:
    import json

    sock.settimeout(timeout)
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise RuntimeError("the zygote ended")
        buf += chunk
    return json.loads(buf.strip())


class Zygote:
    """The process that preloads the libraries and forks one process per exercise."""

    def __init__(self, workdir: Path, kind: str, env: dict | None = None):
        self.workdir, self.kind = Path(workdir), kind
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        base = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent",
                "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
        self.log = self.workdir / f"zygote-{kind}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-B", str(ZYGOTE), str(theirs.fileno()), kind],
                pass_fds=(theirs.fileno(),), env={**base, **(env or {})}, stdin=subprocess.DEVNULL,
                stdout=log, stderr=log, cwd="/")
        theirs.close()
        self.ready = False
        self.lock = threading.Lock()      # one spawn or reap at a time on the socket

    def wait_ready(self) -> None:
        if self.ready:
            return
        try:
            msg = _read_line(self.sock, READY_TIMEOUT)
        except (OSError, RuntimeError, ValueError) as err:
            raise RuntimeError(f"the {self.kind} zygote did not start ({err}): {self._log_tail()}") from None
        if msg.get("ready") is not True:
            raise RuntimeError(f"the {self.kind} zygote did not start: {self._log_tail()}")
        self.sock.settimeout(None)
        self.ready = True

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def spawn(self, *, request: dict, output_fd: int) -> "Child":
        """Fork the process of one exercise. ``request``: bwrap (its path, or None without a
        sandbox), args, exercise, submission, library, limits."""
        with self.lock:
            self.wait_ready()
            req_r, req_w = os.pipe()
            resp_r, resp_w = os.pipe()
            for fd in (req_w, resp_r):
                os.set_inheritable(fd, False)
            try:
                socket.send_fds(self.sock, [_dumps({"op": "spawn", **request}) + b"\n"], [req_r, resp_w, output_fd])
                answer = _read_line(self.sock, 120.0)
                self.sock.settimeout(None)
            finally:
                os.close(req_r)
                os.close(resp_w)
        if "pid" not in answer:
            os.close(req_w)
            os.close(resp_r)
            raise RuntimeError(f"the sandbox of exercise {request.get('exercise')} did not start: "
                               f"{answer.get('error')}")
        return Child(self, answer["pid"], req_w, resp_r)

    def reap(self, pid: int) -> tuple[int, float]:
        """Kill the process and close its sandbox: (wait status, CPU seconds)."""
        with self.lock:
            self.sock.sendall(_dumps({"op": "reap", "pid": pid}) + b"\n")
            answer = _read_line(self.sock, 60.0)
            self.sock.settimeout(None)
        return answer["status"], float(answer.get("cpu", 0.0))

    def close(self) -> None:
        try:
            self.sock.sendall(_dumps({"op": "quit"}) + b"\n")
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()


class Child:
    """One exercise's process: send a request, get its answer within the time left."""

    def __init__(self, zygote: Zygote, pid: int, req_fd: int, resp_fd: int):
        self.zygote, self.pid = zygote, pid
        self.req_fd, self.resp_fd = req_fd, resp_fd
        os.set_blocking(req_fd, False)
        self.budget = 0.0               # seconds of the learner's time left
        self.deadline = math.inf        # time.monotonic() by which its submission's wall budget ends
        self.status = None              # the raw wait status, once reaped
        self.cpu = 0.0                  # CPU seconds the process used, once reaped

    # -- one exchange
    def request(self, header: dict, blobs=()) -> tuple[dict, list]:
        nonce = secrets.token_hex(16)
        data = pack({**header, "nonce": nonce}, blobs)
        start = time.monotonic()
        deadline = min(start + self.budget, self.deadline)
        try:
            self._write(data, deadline)
            answer = self._read(deadline)
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
            raise ChildGone("protocol error", "zero: an answer the grader did not expect on its channel "
                                              "(an unknown status)")
        if status == "disqualified":
            kind, detail = head.get("kind"), head.get("detail")
            raise ChildGone("disqualified", "", kind=f"{kind}\0{detail}" if isinstance(kind, str) and
                            isinstance(detail, str) else "internal\0")
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
    return "exited", f"zero: the process ended with exit status {code} before the tests finished"
