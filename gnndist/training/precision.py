"""``--precision fp32|bf16|fp16``: autocast on the model, fp32 master weights, and fp16's loss scale.

fp32 (the default) changes nothing: no autocast, no scale, today's numbers bit for bit. bf16 and fp16 run
the forward under ``torch.autocast``: the dense layers (linear maps) compute in the half dtype; the
aggregations cast their input to it (:func:`gnndist.graph.compute_dtype`), so halo rows travel in it, and
accumulate in fp32 (every kernel path, ``gnndist.kernels``); weights, gradients and Adam's state stay fp32
(autocast casts the weights per op). fp16 multiplies the loss by a dynamic scale before backward so
that small gradients do not flush to zero: the gradients are all-reduced still scaled, together with one
flag per rank saying whether its gradients overflowed, and a step where any rank overflowed is skipped on
every rank (the scale halves); after :data:`GROWTH_INTERVAL` clean steps in a row it doubles. A scale that
keeps halving (:data:`SKIPPED_WARNING` skipped steps in a row) is warned about, naming ``--loss-scale``.

:class:`Precision` owns the step's arithmetic; the trainer's step is::

    with precision.autocast():
        loss = trainer.task.objective(model(graph, graph.x))
    precision.backward(loss)                                           # fp16: of the scaled loss
    overflow = trainer.allreduce_grads(precision.overflowed(params))   # every rank's flag in the same all-reduce
    precision.step(optimizer, params, overflow, global_loss, epoch, check)   # fp16: skip, or unscale; then step
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from gnndist.errors import UserError, first_line
from gnndist.kernels import DTYPES
from gnndist.nn.conv.pyg_adapter import PyGAdapter

log = logging.getLogger("gnndist")

GROWTH_INTERVAL = 100  # clean fp16 steps in a row before the loss scale doubles
SKIPPED_WARNING = 10  # skipped fp16 steps in a row before the loss scale is warned about


def why_not(device: torch.device, name: str) -> str | None:
    """Why ``device`` cannot run ``--precision name`` under autocast; None when it can.

    Asks torch: autocast must exist for the device type, accept the dtype (torch warns and disables
    itself otherwise), and a small matmul under it must come out in that dtype.
    """
    if name == "fp32":
        return None
    dtype = DTYPES[name]
    if not torch.amp.is_autocast_available(device.type):
        return f"torch has no autocast on {device.type}"
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        return f"{torch.cuda.get_device_name(device)} has no bfloat16"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autocast(device.type, dtype=dtype):
                a = torch.ones(2, 2, device=device)
                out = a @ a
    except (RuntimeError, AssertionError) as e:
        return first_line(e)
    if out.dtype != dtype:
        return f"autocast on {device.type} does not compute in {dtype}"
    return None


def check_device(device: torch.device, name: str) -> None:
    """A one-line :class:`UserError` when ``device`` cannot run ``--precision name`` (fp16: it names bf16)."""
    reason = why_not(device, name)
    if reason is None:
        return
    other = ("; use --precision bf16 (same memory, no loss scale) or fp32" if name == "fp16"
             else "; use --precision fp32")
    raise UserError(f"--precision {name}: {device.type} cannot run it ({reason}){other}")


def check_model(model: nn.Module, name: str) -> None:
    """A one-line :class:`UserError` naming the first layer of ``model`` that cannot run in half.

    Such a layer is a :class:`~gnndist.nn.PyGAdapter` (its ``half_precision`` says why: a wrapped PyG layer's
    scatter sums in the rows' dtype), in any model, one handed to the trainer too; a registered model declares
    it in its spec (:attr:`gnndist.nn.ModelSpec.half_precision`).
    """
    if name == "fp32":
        return
    for path, module in model.named_modules():
        if isinstance(module, PyGAdapter):
            reason, where = module.half_precision, path or "the model"
            raise UserError(f"--precision {name}: {type(module).__name__} ({where}) cannot run in half precision: "
                            f"{reason}; use --precision fp32")


class LossScale:
    """fp16's dynamic loss scale: halve and skip on overflow, double after :data:`GROWTH_INTERVAL` clean steps.

    The scale is a power of two, so scaling and unscaling are exact (no rounding, short of overflow).

    Args:
        initial: the first scale (``--loss-scale``).
    """

    def __init__(self, initial: float):
        self.scale = float(initial)
        self.clean = 0  # clean steps in a row
        self.skipped = 0  # skipped steps in a row
        self.skipped_total = 0
        self._warned = False

    def update(self, overflow: bool, epoch: int) -> None:
        """After a step: ``overflow`` (on any rank) halves the scale, else count towards doubling it."""
        if not overflow:
            self.clean, self.skipped = self.clean + 1, 0
            if self.clean >= GROWTH_INTERVAL:
                self.scale, self.clean = self.scale * 2.0, 0
            return
        self.scale = max(self.scale / 2.0, 2.0**-24)
        self.clean, self.skipped, self.skipped_total = 0, self.skipped + 1, self.skipped_total + 1
        if self.skipped >= SKIPPED_WARNING and not self._warned:
            self._warned = True
            warnings.warn(f"epoch {epoch}: the fp16 loss scale (--loss-scale) fell to {self.scale:g} over "
                          f"{self.skipped} skipped steps in a row: the gradients overflow fp16 at any scale; "
                          f"use --precision bf16 (fp32's range) or lower --lr", RuntimeWarning, stacklevel=2)

    def state_dict(self) -> dict:
        return {"scale": self.scale, "clean": self.clean, "skipped_total": self.skipped_total}


class Precision:
    """The run's arithmetic: its autocast context and, for fp16, its :class:`LossScale`.

    Args:
        name: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (``--precision``).
        device: the rank's device (checked: :func:`check_device`).
        loss_scale: fp16's initial scale (``--loss-scale``).
    """

    def __init__(self, name: str, device: torch.device, loss_scale: float = 2.0**16):
        check_device(device, name)
        self.name, self.device, self.dtype = name, device, DTYPES[name]
        self.scaler = LossScale(loss_scale) if name == "fp16" else None

    @property
    def half(self) -> bool:
        return self.name != "fp32"

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """The model's forward (and loss) under autocast in the run's dtype; nothing for fp32."""
        if not self.half:
            yield
            return
        with torch.autocast(self.device.type, dtype=self.dtype):
            yield

    @property
    def scale(self) -> float:
        """The factor the loss is multiplied by before backward (1 without fp16)."""
        return self.scaler.scale if self.scaler is not None else 1.0

    @property
    def scaled(self) -> bool:
        """Whether the loss is scaled (fp16): the gradients' all-reduce then carries each rank's overflow flag."""
        return self.scaler is not None

    def backward(self, loss: Tensor) -> None:
        """``loss.backward()``, of the loss times the scale under fp16."""
        (loss * self.scaler.scale if self.scaler is not None else loss).backward()

    def overflowed(self, params: list[nn.Parameter]) -> bool:
        """Whether a gradient of this rank is not finite under fp16 (its flag for the all-reduce); else False."""
        if self.scaler is None:
            return False
        grads = [p.grad for p in params if p.grad is not None]
        return not (bool(torch.stack([g.isfinite().all() for g in grads]).all()) if grads else True)

    def step(self, optimizer: torch.optim.Optimizer, params: list[nn.Parameter], overflow: bool, loss: Tensor,
             epoch: int, check: Callable[[], None]) -> bool:
        """The optimiser's step on the summed gradients; returns whether it was taken.

        ``overflow``: any rank's flag, from the gradients' all-reduce; ``loss``: the global loss. Under fp16 an
        overflow or a loss that is not finite skips the step on every rank and halves the scale; else the
        gradients are divided by the scale (a power of two: exact). ``check`` runs before the step (the
        trainer's guard against a loss or gradient that is not finite).
        """
        if self.scaler is not None:
            skip = overflow or not bool(torch.isfinite(loss))
            self.scaler.update(skip, epoch)
            if skip:
                return False
            inv = 1.0 / self.scaler.scale
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(inv)
        check()
        optimizer.step()
        return True

    def report(self) -> dict | None:
        """fp16's loss scale now and the steps it skipped (the same on every rank); None without fp16."""
        return None if self.scaler is None else {"scale": self.scaler.scale, "skipped_steps": self.scaler.skipped_total}


@dataclass(frozen=True)
class Bound:
    """Relative differences (max norm) allowed between P ranks and one process in one dtype."""

    step: float  # a loss, logits: the forward chain
    grad: float  # a gradient: the forward chain, the backward chain and its own rounding


# half roundings in series per layer: its input, the dense product, the aggregation, the elementwise rest
ROUNDINGS_PER_LAYER = 4


def p_bound(dtype: torch.dtype, layers: int) -> Bound:
    """The derived bound of ``docs/strategies.md`` ("Half precision") for a model of ``layers`` layers."""
    u = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}[dtype]
    chain = ROUNDINGS_PER_LAYER * (layers + 2)  # + the input and output maps
    step = 2 * u * chain
    return Bound(step=step, grad=2 * step + 2 * u)
