"""The process that serves one exercise, inside its sandbox: the only code that shares a process
with a submission.

The zygote (:mod:`.zygote`) forks it, puts it in the exercise's sandbox and under its limits
(:mod:`.confine`); then :func:`run` hardens the interpreter, installs the audit hook
(:mod:`.guard`) and answers the judge's requests, one at a time, on file descriptors 3 (requests)
and 4 (answers): import the learner's module, call a function or a method with these inputs,
count the Python steps of a call, measure its peak memory, run a backward pass, act on a module
it built. The inputs and the outputs travel as data only (:mod:`.wire`), and each answer carries
the nonce of its request, so bytes a submission writes to the pipe are a protocol error, not an
answer.

The learner's files are in the sandbox at ``/submission`` (the first entry of ``sys.path``) and
are imported the ordinary way; the library's view is at ``/grader/lib``. This process never
sees an expected value: every score is computed by the judge from the outputs. It defines no
class, and the zygote removes its modules from ``sys.modules``: nothing a submission can reach
leads back to the functions below.
"""
from __future__ import annotations

import importlib
import os
import sys

from . import guard, wire


def run(*, req: dict, torch, own_codes: dict, library_dirs, stdlib_dirs, starters) -> None:
    """Serve the judge until it says goodbye (or closes the channel)."""
    learner_dir = req["submission"]
    library_dir = req["library"]
    os.environ["GRADER_EXERCISE"] = req["exercise"]
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    sys.argv = [""]
    sys.path[:0] = [learner_dir, library_dir]
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    import _tracemalloc

    tracemalloc = (_tracemalloc.start, _tracemalloc.stop, _tracemalloc.get_traced_memory,
                   _tracemalloc.reset_peak, _tracemalloc.is_tracing)
    guard.harden(starters)
    _serve(torch=torch, own_codes=own_codes, tracemalloc=tracemalloc,
           learner_dirs=(learner_dir.rstrip("/") + "/",),
           library_dirs=tuple(library_dirs) + (library_dir.rstrip("/") + "/",), stdlib_dirs=tuple(stdlib_dirs))


def _serve(*, torch, own_codes, tracemalloc, learner_dirs, library_dirs, stdlib_dirs):
    trusted_dirs = library_dirs + stdlib_dirs
    recv, _ = wire.fd_channel(3)
    _, send_raw = wire.fd_channel(4)
    pack, unpack, encode, decode = wire.pack, wire.unpack, wire.encode, wire.decode
    exit_now, dq_exit = os._exit, guard.DQ_EXIT
    import_module = importlib.import_module
    count_steps = guard.count_steps
    tm_start, tm_stop, tm_peak, tm_reset, tm_tracing = tracemalloc
    if torch is not None:
        no_grad, enable_grad = torch.no_grad, torch.enable_grad
        TensorBase = torch._C.TensorBase
        t_sum, t_mul, t_abs = TensorBase.sum, TensorBase.mul, TensorBase.abs
        t_backward, t_isfinite, t_linspace = torch.autograd.backward, torch.isfinite, torch.linspace
        Module, LayerNorm, Tensor = torch.nn.Module, torch.nn.LayerNorm, torch.Tensor
    current = {"nonce": ""}
    handles, state = {}, {"module": None}
    blob_box = [()]

    def reply(header, blobs=()):
        header = dict(header)
        header["nonce"] = current["nonce"]
        send_raw(pack(header, blobs))

    def send_dq(kind, detail):
        reply({"status": "disqualified", "kind": kind, "detail": detail})

    sys.addaudithook(guard.audit_hook(learner_dirs=learner_dirs, library_dirs=library_dirs, stdlib_dirs=stdlib_dirs,
                                      own_codes=own_codes, send_dq=send_dq, exit_now=exit_now, protocol_fds=(3, 4)))
    try:
        absent = import_module("_grader_absent")      # the view's stand-in for what is not allowed
    except ImportError:
        absent = None

    def resolve(n):
        if "handle" in n:
            obj = handles.get(n["handle"])
            if obj is None:
                raise KeyError("no such handle")
            return obj
        return run_call(n["call"])[0]

    def arguments(spec, blobs):
        args = decode(spec.get("args", {"list": []}), blobs, torch=torch, strict=False, refs=resolve)
        kwargs = decode(spec.get("kwargs", {"dict": []}), blobs, torch=torch, strict=False, refs=resolve)
        return list(args), dict(kwargs)

    def target_of(spec):
        tgt = spec["target"]
        if "handle" in tgt:
            obj = handles[tgt["handle"]]
            return obj if tgt.get("method") is None else getattr(obj, tgt["method"])
        return getattr(state["module"], tgt["attr"])

    def call(fn, args, kwargs, without_grad):
        if without_grad and torch is not None:
            with no_grad():
                return fn(*args, **kwargs)
        return fn(*args, **kwargs)

    def run_call(spec):
        args, kwargs = arguments(spec, blob_box[0])
        return call(target_of(spec), args, kwargs, spec.get("no_grad")), args

    def safe_str(x):
        try:
            return str(x)[:300] if x is not None else ""
        except BaseException:                           # noqa: BLE001 - the learner's __str__
            return "(an unprintable value)"

    def where(err):
        """'ex02_self_attention.py, line 41': the innermost frame of the learner's files."""
        found, tb = "", err.__traceback__
        while tb is not None:
            filename = tb.tb_frame.f_code.co_filename
            if type(filename) is str and filename.startswith(learner_dirs):
                found = f"{filename.rsplit('/', 1)[-1]}, line {tb.tb_lineno}"
            tb = tb.tb_next
        return found

    def raised(err):
        kinds = [base.__name__ for base in type(err).__mro__
                 if base.__module__ == "builtins" and type(base.__name__) is str]
        return {"status": "raised", "type": type.__dict__["__name__"].__get__(type(err)),
                "bases": kinds[:8], "message": safe_str(err), "where": where(err)}

    def outcome(body):
        """Run body() -> (header, blobs); translate the learner's exceptions."""
        try:
            header, blobs = body()
        except NotImplementedError as err:
            header, blobs = {"status": "notdone", "message": safe_str(err)}, []
        except SystemExit as err:
            header, blobs = {"status": "exit", "message": safe_str(err.code)}, []
        except KeyboardInterrupt:
            header, blobs = {"status": "exit", "message": "KeyboardInterrupt"}, []
        except OverflowError as err:
            if str(err) in ("output too large", "output too deeply nested or too large"):
                header, blobs = {"status": "toolarge", "message": str(err)}, []
            else:
                header, blobs = raised(err), []
        except BaseException as err:                    # noqa: BLE001 - the learner's error
            header, blobs = raised(err), []
        if tm_tracing() and not state.get("tracing"):
            send_dq("tracer", "tracemalloc was started")
            exit_now(dq_exit)
        return header, blobs

    def value_reply(value):
        blobs = []
        node = encode(value, blobs, torch=torch)
        return {"status": "ok", "value": node}, blobs

    def do_import(r):
        name = r["module"]

        def body():
            try:
                state["module"] = import_module(name)
            except SyntaxError as err:
                where_ = f" ({safe_str(err.filename).rsplit('/', 1)[-1]})" if err.filename else ""
                return {"status": "import", "message": f"{name}.py does not compile: SyntaxError at line "
                                                       f"{safe_str(err.lineno)}: {safe_str(err.msg)}{where_}"}, []
            return {"status": "ok"}, []

        header, blobs = outcome(body)
        if absent is not None:
            absent.STRICT = True
        if header["status"] not in ("ok", "import"):
            return {"status": "import", "message": header.get("message", ""), "error": header}, []
        return header, blobs

    def do_call(r):
        def body():
            out, _ = run_call(r["call"])
            if r.get("keep"):
                handles[len(handles) + 1] = out
                is_module = torch is not None and isinstance(out, Module)
                return {"status": "ok", "handle": len(handles), "module": is_module}, []
            return value_reply(out)
        return outcome(body)

    def do_steps(r):
        def body():
            spec = r["call"]
            args, kwargs = arguments(spec, blob_box[0])
            fn = target_of(spec)
            steps = count_steps(lambda: call(fn, args, kwargs, spec.get("no_grad")),
                                learner_dirs=learner_dirs, trusted_dirs=trusted_dirs)
            return {"status": "ok", "steps": steps}, []
        return outcome(body)

    def do_memory(r):
        def body():
            spec = r["call"]
            args, kwargs = arguments(spec, blob_box[0])
            fn = target_of(spec)
            state["tracing"] = True
            tm_start(1)
            tm_reset()
            try:
                call(fn, args, kwargs, spec.get("no_grad"))
                if not tm_tracing():
                    send_dq("tracer", "tracemalloc was stopped")
                    exit_now(dq_exit)
                peak = tm_peak()[1]
            finally:
                tm_stop()
                state["tracing"] = False
            return {"status": "ok", "peak": int(peak)}, []
        return outcome(body)

    def do_grad(r):
        def body():
            spec = r["call"]
            args, kwargs = arguments(spec, blob_box[0])
            fn = target_of(spec)
            with enable_grad():
                out = fn(*args, **kwargs)
                if type(out) is not Tensor:
                    return {"status": "ok", "value": encode(out, [], torch=torch), "grads": None}, []
                t_backward(t_sum(out))
            grads = [args[i].grad if type(args[i]) is Tensor else None for i in r["wrt"]]
            blobs = []
            node = encode(out, blobs, torch=torch)
            gnode = encode(tuple(grads), blobs, torch=torch)
            return {"status": "ok", "value": node, "grads": gnode}, blobs
        return outcome(body)

    def do_module(r):
        obj = handles.get(r["handle"])
        action = r["action"]

        def body():
            if action == "state_dict":
                return value_reply(dict(obj.state_dict()))
            if action == "to":
                res = obj.to(decode(r["dtype"], [], torch=torch, strict=False))
                if isinstance(res, Module):
                    handles[r["handle"]] = res
                return {"status": "ok"}, []
            if action in ("eval", "train"):
                getattr(obj, action)()
                return {"status": "ok"}, []
            if action == "load_state_dict":
                obj.load_state_dict(decode(r["state"], blob_box[0], torch=torch, strict=False), strict=True)
                return {"status": "ok"}, []
            if action == "layer_norm_eps":
                return value_reply([float(m.eps) for m in obj.modules() if isinstance(m, LayerNorm)])
            if action == "param_grads":
                x = decode(r["x"], blob_box[0], torch=torch, strict=False).requires_grad_()
                obj.train()
                for p in obj.parameters():
                    p.grad = None
                out = obj(x)
                w = t_linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
                t_backward(t_sum(t_mul(out, w)))
                return value_reply([(n, p.grad is None or not bool(t_isfinite(p.grad).all()) or
                                     float(t_sum(t_abs(p.grad))) == 0.0) for n, p in obj.named_parameters()])
            return {"status": "bad", "message": "unknown module action"}, []
        if obj is None or torch is None:
            return {"status": "bad", "message": "no such handle"}, []
        return outcome(body)

    ops = {"import": do_import, "call": do_call, "steps": do_steps, "memory": do_memory, "grad": do_grad,
           "module": do_module}
    while True:
        data = recv()
        if data is None:
            exit_now(0)
        header, blobs = unpack(data)
        current["nonce"] = header.get("nonce", "")
        blob_box[0] = blobs
        op = header.get("op")
        if op == "bye":
            exit_now(0)
        handler = ops.get(op)
        reply(*(handler(header) if handler is not None else ({"status": "bad", "message": "unknown op"}, [])))
