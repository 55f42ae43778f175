"""Pick a kernel per call by declared capability.

Every op has implementations in ``kernels/<op>/<impl>.py``; each module exposes the op
function and may expose ``why_not(*args) -> str | None``, the reason it cannot run
these inputs. The first argument, whose device decides, is the CSR (``dropout``: its input rows). The
dispatcher tries the implementations in the device's order and calls the first that fits; if none does,
it raises one error listing every reason.

    cuda: triton, sparse, reference
    cpu:  sparse, reference          (triton only when forced, under TRITON_INTERPRET=1)

``impl=`` on a call forces one path; the caller decides it (an entry point reads the user's
``GNNDIST_KERNEL`` once, :func:`gnndist.kernels.settings_from_env`, and passes the value down).
Nothing here reads the environment except Triton's own ``TRITON_INTERPRET``.

**Measured selection.** On CUDA, when more than one implementation of a :data:`MEASURED`
op fits, the first call times each of them once on the real inputs (forward only) and
caches the fastest on the CSR, per dtype, width bucket (next power of two), reduction and
weight kind; a path with a ``tune(csr, *args)`` hook (the Triton SpMM: its tiles) measures
its own settings on the inputs first and is timed with them (and still tunes when it is the
only path that fits, e.g. per-head weights); ``tune=False`` skips those hooks. An SpMM's
backward ``A^T grad`` is dispatched as an SpMM on the cached transpose
(``spmm.transposed_product``), so it is timed and chosen per direction: the
forward may run Triton and the backward cuSPARSE. So dispatch never keeps a path that is
slower than another on this graph, direction and device (e.g. Triton vs cuSPARSE);
:func:`choices` lists what was decided and the times. A call forced to one path (``impl=``)
keeps it in its backward (:func:`pinned`), and an unforced one its ``tune`` (:func:`tuning`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
import os
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import torch

from gnndist.errors import UserError

from .csr import CSR

# op -> implementations that exist for it
IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "spmm": ("triton", "sparse", "reference"),
    "sddmm": ("triton", "reference"),
    "segment_softmax": ("triton", "reference"),
    "segment_max": ("triton", "reference"),
    "dropout": ("triton", "reference"),
}
KNOWN = ("triton", "sparse", "reference")
MEASURED = ("spmm",)  # ops whose paths are chosen by timing them on first use ...
MEASURE_ON = ("cuda",)  # ... on these devices
log = logging.getLogger(__name__)
ORDER: dict[str, tuple[str, ...]] = {
    "cuda": ("triton", "sparse", "reference"),
    "cpu": ("sparse", "reference"),
}
# (forced implementation or None, tune) of the op call running now, for its autograd function's backward
_CALL: ContextVar[tuple[str | None, bool]] = ContextVar("gnndist_kernel_call", default=(None, True))


class NoKernelError(UserError):
    """No implementation of an op accepts the inputs (or the forced one does not)."""


def interpreting() -> bool:
    """True when ``TRITON_INTERPRET`` asks Triton to run kernels on the CPU (Triton's own variable, parsed here
    only)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


@functools.cache
def triton_installed() -> bool:
    """Whether the ``triton`` package is installed (checked once; the one place that asks)."""
    return importlib.util.find_spec("triton") is not None


def _triton_why_not(device: torch.device) -> str | None:
    """Reasons shared by every Triton kernel: package, device, interpreter."""
    if not triton_installed():
        return "package not installed"
    if device.type == "cuda":
        return None
    if device.type == "cpu":
        return None if interpreting() else "tensor is on cpu and TRITON_INTERPRET is not set"
    return f"tensor is on {device.type}"


def _module(op: str, name: str):
    return importlib.import_module(f"{__package__}.{op}.{name}")


def why_not(op: str, name: str, csr: CSR, *args) -> str | None:
    """Why implementation ``name`` of ``op`` cannot run these inputs; None when it can."""
    if name not in KNOWN:
        return f"unknown implementation (choose from {', '.join(KNOWN)})"
    if name not in IMPLEMENTATIONS[op]:
        return f"no {name} implementation of {op}"
    if name == "triton":
        reason = _triton_why_not(csr.device)
        if reason is not None:
            return reason
    check = getattr(_module(op, name), "why_not", None)
    return check(csr, *args) if check is not None else None


def select(op: str, csr: CSR, *args, impl: str | None = None, tune: bool = True) -> tuple[str, Callable]:
    """The implementation that will run ``op`` on these inputs: ``(name, function)``.

    ``impl`` forces one (its reason is raised if it does not fit); None tries :data:`ORDER`.
    ``tune``: let a measured path measure its own settings first (see the module doc).
    """
    forced = impl or None
    names = (forced,) if forced else ORDER.get(csr.device.type, ("reference",))
    reasons, fits = [], []
    for name in names:
        reason = why_not(op, name, csr, *args)
        if reason is None:
            fits.append(name)
            if forced or op not in MEASURED or csr.device.type not in MEASURE_ON:
                break
        else:
            reasons.append(f"{name}: {reason}")
    fits = [n for n in fits if n != "reference"] or fits  # the reference is the last resort, never timed
    if len(fits) > 1:
        name = _measured(op, csr, args, fits, tune)
        return name, getattr(_module(op, name), op)
    if fits:
        if tune and not forced and op in MEASURED and csr.device.type in MEASURE_ON and fits[0] != "reference":
            _tune(op, fits[0], csr, args)  # the only path that fits still measures its own settings
        return fits[0], getattr(_module(op, fits[0]), op)
    how = f"forced by impl={impl!r}" if forced else "tried"
    raise NoKernelError(f"no {op} kernel fits ({how}) — " + "; ".join(reasons))


def _key(op: str, args: tuple) -> tuple:
    """What a measured choice depends on besides the graph: dtypes, width bucket, flags."""
    parts: list[object] = [op]
    for a in args:
        if isinstance(a, torch.Tensor):
            width = a[0].numel() if a.dim() > 1 and a.shape[0] else 1
            parts.append((a.dtype, a.dim(), 1 << max(0, width - 1).bit_length()))
        else:
            parts.append(a if a is None or isinstance(a, (bool, int, str)) else type(a).__name__)
    return tuple(parts)


def _measured(op: str, csr: CSR, args: tuple, names: list[str], tune: bool) -> str:
    """The fastest of ``names`` for ``op`` on these inputs, timed once and cached on ``csr``."""
    best, _ = csr.cached(("dispatch",) + _key(op, args), lambda: _measure(op, csr, args, names, tune))
    return best


def _measure(op: str, csr: CSR, args: tuple, names: list[str], tune: bool) -> tuple[str, dict[str, float]]:
    """Time each of ``names`` (after its own tuning, if ``tune``): ``(fastest, seconds per name)``."""
    times, errors = {}, {}
    for name in names:
        try:
            if tune:
                _tune(op, name, csr, args)
            times[name] = (_TIMER[0] or _time)(getattr(_module(op, name), op), csr, args)
        except Exception as e:  # e.g. a kernel this GPU or Triton version cannot compile: use the others
            errors[name] = e
            log.warning("%s: the %s path failed while being timed, not used: %s", op, name,
                        str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__)
    if not times:
        raise next(iter(errors.values()))
    best = min(times, key=times.get)
    log.info("%s on %s, %s: %s", op, csr, _key(op, args)[1:],
             ", ".join(f"{n} {1e3 * t:.3f} ms" for n, t in times.items()))
    return best, times


def _tune(op: str, name: str, csr: CSR, args: tuple) -> None:
    """Let path ``name`` measure its own settings on these inputs (its ``tune`` hook, e.g. Triton tiles)."""
    module = _module(op, name)
    if hasattr(module, "tune"):
        module.tune(csr, *args)


# how a path is timed: (the path's op, csr, args) -> seconds; None: the device clock (_time)
Timer = Callable[[Callable, CSR, tuple], float]
# process-wide, not a context variable: on CUDA autograd runs a backward on a thread of its own, which a context
# variable set by the caller does not reach (the H200 run of issue 50: the backward's A^T was timed by the clock)
_TIMER: list[Timer | None] = [None]


@contextlib.contextmanager
def timed_by(timer: Timer) -> Iterator[None]:
    """Within it, the dispatcher times each path with ``timer(fn, csr, args)`` (seconds) instead of the device's
    clock, in every thread (autograd's device threads too): the seam through which a test hands it a fake clock.
    The previous timer is back on exit."""
    before, _TIMER[0] = _TIMER[0], timer
    try:
        yield
    finally:
        _TIMER[0] = before


def _time(fn: Callable, csr: CSR, args: tuple, reps: int = 5) -> float:
    """Median seconds of the forward ``fn(csr, *args)`` on the device, after 2 warm-ups."""
    inputs = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]

    def once() -> None:
        with torch.no_grad():
            fn(csr, *inputs)

    return device_time(once, reps)


def device_time(fn: Callable[[], object], reps: int = 5, warmup: int = 2) -> float:
    """Median seconds of ``fn()`` between two CUDA events (host launch time included), after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[reps // 2]


def choices(csr: CSR) -> dict[tuple, tuple[str, dict[str, float]]]:
    """Measured choices made on ``csr``: key -> (implementation, seconds per implementation)."""
    return csr.cached_items("dispatch")


def pinned() -> str | None:
    """The implementation the running call was forced to (``impl=``), else None.

    An autograd function records it in its forward so that its backward's own kernels
    (e.g. ``A^T grad``) run on the same path instead of being chosen anew.
    """
    return _CALL.get()[0]


def tuning() -> bool:
    """The running call's ``tune``: an autograd function records it for the kernels its backward dispatches."""
    return _CALL.get()[1]


def run(op: str, csr: CSR, *args, impl: str | None = None, tune: bool = True):
    """Run ``op`` with the first implementation that fits (see :func:`select`).

    Autocast is off inside: every implementation takes the dtype it is given (fp32, or bf16 / fp16
    accumulated in fp32) and returns it, so an op inside one (``torch.sparse.mm`` is a matmul to
    autocast) is never cast behind its back.
    """
    name, fn = select(op, csr, *args, impl=impl, tune=tune)
    token = _CALL.set((name if impl else None, tune))
    try:
        with torch.autocast(csr.device.type, enabled=False):
            return fn(csr, *args)
    finally:
        _CALL.reset(token)
