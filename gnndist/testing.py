"""Test helpers shared by the test suite: relative-error comparison and capability markers."""

from __future__ import annotations

import importlib.util

import torch


def rel_err(ref: torch.Tensor, out: torch.Tensor) -> float:
    """Max-norm relative error ``max|ref - out| / max(max|ref|, tiny)``."""
    ref = ref.detach().double()
    out = out.detach().double()
    denom = ref.abs().max().item() if ref.numel() else 0.0
    diff = (ref - out).abs().max().item() if ref.numel() else 0.0
    return diff / max(denom, 1e-12)


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, rtol: float = 1e-5) -> None:
    """Assert ``out`` equals ``ref`` within ``rtol`` relative (max-norm); the message names the tensor."""
    assert ref.shape == out.shape, f"{name}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    err = rel_err(ref, out)
    assert err <= rtol, f"{name}: relative error {err:.3e} > {rtol:.1e}"


HAS_CUDA = torch.cuda.is_available()
HAS_TRITON = importlib.util.find_spec("triton") is not None
