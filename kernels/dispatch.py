"""Pick a kernel per call by declared capability.

Every op has implementations in ``kernels/<op>/<impl>.py``; each module exposes the op
function and may expose ``why_not(*args) -> str | None``, the reason it cannot run
these inputs. The dispatcher tries the implementations in the device's order and
calls the first that fits; if none does, it raises one error listing every reason.

    cuda: triton, sparse, reference
    cpu:  sparse, reference          (triton only when forced, under TRITON_INTERPRET=1)

``GNNDIST_KERNEL=reference|sparse|triton`` (or ``impl=`` on a call) forces one path.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable

import torch

from gnndist.errors import UserError

from .csr import CSR

ENV_VAR = "GNNDIST_KERNEL"

# op -> implementations that exist for it
IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "spmm": ("triton", "sparse", "reference"),
    "sddmm": ("triton", "reference"),
    "segment_softmax": ("triton", "reference"),
    "segment_max": ("triton", "reference"),
    "gcn_aggregate": ("triton", "sparse", "reference"),
}
KNOWN = ("triton", "sparse", "reference")
ORDER: dict[str, tuple[str, ...]] = {
    "cuda": ("triton", "sparse", "reference"),
    "cpu": ("sparse", "reference"),
}


class NoKernelError(UserError):
    """No implementation of an op accepts the inputs (or the forced one does not)."""


def interpreting() -> bool:
    """True when ``TRITON_INTERPRET`` asks Triton to run kernels on the CPU."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _triton_why_not(device: torch.device) -> str | None:
    """Reasons shared by every Triton kernel: package, device, interpreter."""
    if importlib.util.find_spec("triton") is None:
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


def select(op: str, csr: CSR, *args, impl: str | None = None) -> tuple[str, Callable]:
    """The implementation that will run ``op`` on these inputs: ``(name, function)``."""
    forced = impl or os.environ.get(ENV_VAR) or None
    names = (forced,) if forced else ORDER.get(csr.device.type, ("reference",))
    reasons = []
    for name in names:
        reason = why_not(op, name, csr, *args)
        if reason is None:
            return name, getattr(_module(op, name), op)
        reasons.append(f"{name}: {reason}")
    how = f"forced by impl={impl!r}" if impl else f"forced by {ENV_VAR}={forced}" if forced else "tried"
    raise NoKernelError(f"no {op} kernel fits ({how}) — " + "; ".join(reasons))


def run(op: str, csr: CSR, *args, impl: str | None = None):
    """Run ``op`` with the first implementation that fits (see :func:`select`)."""
    return select(op, csr, *args, impl=impl)[1](csr, *args)
