"""Putting a forked process into its exercise's sandbox, and under its limits.

Bubblewrap builds each exercise's sandbox: new user, mount, pid, ipc, network and uts
namespaces, a read-only root with only the interpreter and its packages, the exercise's view of
the library and the submission's own files, a private ``/tmp``, ``/dev/shm`` and ``/proc``. Its
process inside only waits (``cat`` on a pipe from the zygote). Starting Python and PyTorch
there for every exercise would take seconds, so the zygote, which imported them once, forks,
and the fork *enters* that sandbox (:func:`enter_outer`, then :func:`enter_inner`) the way
``nsenter`` does: ``setns`` on the namespaces of bubblewrap's process, the user namespace
first (its owner is our own user, so no privilege is needed, root or not). Entering the pid
namespace takes one more fork, which is why the zygote's child waits for its own child, the
process that serves the exercise. Then :func:`drop_privileges` clears every capability (checked
in ``/proc/self/status``, fail closed) and sets no-new-privileges, as bubblewrap does for its own
children, and :func:`set_limits` sets CPU time, address space, output size, open files and
"one process": the kernel refuses any fork or thread.

Nothing here imports a submission: these functions run in the zygote's fork before the
learner's code exists in the process.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import resource
import signal

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
NS_GET_PARENT = 0xB702
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_NAMESPACES = (("mnt", CLONE_NEWNS), ("net", CLONE_NEWNET), ("ipc", CLONE_NEWIPC), ("uts", CLONE_NEWUTS))

_libc = ctypes.CDLL(None, use_errno=True)
_setns, _prctl, _capset = _libc.setns, _libc.prctl, _libc.capset


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, value: int) -> None:
    _check(_prctl(option, value, 0, 0, 0), f"prctl({option})")


def die_with_parent() -> None:
    """SIGKILL from the kernel when the parent ends (checked after, in case it already did)."""
    parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)


def open_namespaces(pid: int) -> dict:
    """File descriptors of the namespaces of process ``pid`` (bubblewrap's process in the
    sandbox): 'user' is its own, 'owner' the user namespace above it that bubblewrap made first
    (the same as 'user' without --disable-userns), then mnt, pid, net, ipc, uts."""
    fds = {name: os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
           for name in ("user", "mnt", "pid", "net", "ipc", "uts")}
    parent = fcntl.ioctl(fds["user"], NS_GET_PARENT)
    here = os.stat("/proc/self/ns/user").st_ino
    if os.fstat(parent).st_ino == here:                 # a single user namespace
        os.close(parent)
        fds["owner"] = os.dup(fds["user"])
    else:
        fds["owner"] = parent
    return fds


def enter_outer(fds: dict) -> None:
    """In the zygote's fork: the sandbox's first user namespace, and its pid namespace for the
    children (the next fork lands in it)."""
    _check(_setns(fds["owner"], CLONE_NEWUSER), "setns(user)")
    _check(_setns(fds["pid"], CLONE_NEWPID), "setns(pid)")


def enter_inner(fds: dict) -> None:
    """In the fork inside the pid namespace: the mount, network, ipc and uts namespaces, then
    the user namespace bubblewrap's process runs in; the root and working directory become the
    sandbox's."""
    for name, kind in _NAMESPACES:
        _check(_setns(fds[name], kind), f"setns({name})")
    if os.fstat(fds["user"]).st_ino != os.fstat(fds["owner"]).st_ino:
        _check(_setns(fds["user"], CLONE_NEWUSER), "setns(user)")
    for fd in fds.values():
        os.close(fd)
    os.chdir("/")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges() -> None:
    """No capability in any set, none to regain (bounding set, ambient set, no-new-privs)."""
    for cap in range(64):
        _prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)           # past the last capability: EINVAL, ignored
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _check(_capset(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), (_CapData * 2)()), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    with open("/proc/self/status") as fh:
        status = dict(line.split(":", 1) for line in fh if ":" in line)
    if any(int(status.get(key, "1").strip(), 16) for key in ("CapEff", "CapPrm", "CapBnd", "CapAmb")):
        raise OSError("capabilities left after dropping them")


def redirect(req_fd: int, resp_fd: int, out_fd: int) -> None:
    """stdin from /dev/null, stdout and stderr to the output file, the judge's requests on 3 and
    the answers on 4; every other descriptor closed."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in (req_fd, resp_fd, out_fd)]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for target, fd in ((1, high[2]), (2, high[2]), (3, high[0]), (4, high[1])):
        os.dup2(fd, target)
    os.closerange(5, 1 << 16)


def set_core_limit() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def set_limits(limits: dict) -> None:
    """CPU seconds, output bytes, added address space, 64 open files, one process."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["output"], limits["output"]))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu"], limits["cpu"] + 1))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    with open("/proc/self/status") as fh:
        vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + limits["memory"], vm + limits["memory"]))
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))   # no fork, no thread: the kernel refuses
    prctl(PR_SET_DUMPABLE, 0)
