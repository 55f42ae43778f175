"""The user's kernel choice as a value: which implementation, whether SpMM tiles are measured.

An entry point (CLI, launcher, a script) calls :func:`settings_from_env` once (or
:func:`settings_from_config` on a run's ``--kernel`` / ``--spmm-tune``) and passes the value
down: ``spmm(..., impl=s.impl, tune=s.tune)``. Nothing below the entry point reads the
environment.

    GNNDIST_KERNEL=triton|sparse|reference   force one path for every op (unset, "" or "auto": dispatch)
    GNNDIST_SPMM_TUNE=0                      never measure SpMM tiles (the fixed ``TILES`` everywhere)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .dispatch import KNOWN, NoKernelError

# dtype names as the flags spell them (--precision, --comm-dtype, the benchmarks' --dtype): the one table
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

if TYPE_CHECKING:
    from gnndist.config import KernelConfig

KERNEL_VAR = "GNNDIST_KERNEL"
TUNE_VAR = "GNNDIST_SPMM_TUNE"


@dataclass(frozen=True)
class KernelSettings:
    """Which kernels a run uses.

    Args:
        impl: force this implementation for every op (``"triton"``, ``"sparse"``, ``"reference"``);
            None (default) lets the dispatcher choose by capability (and, on CUDA, by timing).
        tune: measure the Triton SpMM's tiles on each graph before it is timed against the
            other paths (default True; CUDA only). A forced path never tunes.
    """

    impl: str | None = None
    tune: bool = True

    def __post_init__(self) -> None:
        if self.impl is not None and self.impl not in KNOWN:
            raise NoKernelError(f"unknown kernel {self.impl!r} (choose from {', '.join(KNOWN)}, or None to dispatch)")


def settings_from_env(environ: Mapping[str, str] | None = None) -> KernelSettings:
    """The user's overrides from ``GNNDIST_KERNEL`` and ``GNNDIST_SPMM_TUNE`` (default: ``os.environ``).

    Call it once, at an entry point. A bad name is one line naming the variable.
    """
    env = os.environ if environ is None else environ
    impl = env.get(KERNEL_VAR, "").strip() or None
    if impl == "auto":
        impl = None
    if impl is not None and impl not in KNOWN:
        raise NoKernelError(f"{KERNEL_VAR}={impl}: unknown implementation (choose from auto, {', '.join(KNOWN)})")
    return KernelSettings(impl=impl, tune=env.get(TUNE_VAR, "1").strip() != "0")


def settings_from_config(config: KernelConfig) -> KernelSettings:
    """The value every kernel call of a run receives, from its config section (``--kernel auto``: dispatch)."""
    return KernelSettings(None if config.kernel == "auto" else config.kernel, config.spmm_tune)
