"""Graphs, cases and tolerances for the kernel tests (``tests/test_kernels_*.py``).

Call :func:`use_interpreter` at the top of a test module, before anything imports a
Triton kernel: on a machine without CUDA it sets ``TRITON_INTERPRET=1`` so the Triton
kernels run on CPU tensors (Triton reads the variable when a kernel is decorated).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import Tensor

from gnndist.testing import assert_close

from .csr import CSR

# max-norm relative error allowed against the fp32/fp64 reference
RTOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 2e-2}
WIDTHS = (1, 37, 128)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def use_interpreter() -> str:
    """Device for the Triton tests: ``"cuda"``, else ``"cpu"`` with ``TRITON_INTERPRET=1`` set."""
    if torch.cuda.is_available():
        return "cuda"
    os.environ["TRITON_INTERPRET"] = "1"
    return "cpu"


def power_law_graph(n_rows: int, n_cols: int, avg_degree: float, exponent: float = 2.1, seed: int = 0,
                    empty_fraction: float = 0.0, index_dtype: torch.dtype = torch.int64,
                    device: str | torch.device = "cpu") -> CSR:
    """Random graph whose in-degrees follow a power law (Pareto tail) and whose sources are skewed too.

    ``empty_fraction`` of the rows get no edge at all. Vectorised: no loop over nodes or edges.
    """
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n_rows, generator=g)
    deg = (u.clamp(min=1e-6) ** (-1.0 / (exponent - 1.0)))  # Pareto(exponent - 1), min 1
    deg = (deg * avg_degree / deg.mean()).ceil().long().clamp(max=n_cols * 4)
    deg[torch.rand(n_rows, generator=g) < empty_fraction] = 0
    row = torch.repeat_interleave(torch.arange(n_rows), deg)  # [nnz]
    popularity = (torch.arange(n_cols, dtype=torch.float64) + 1.0) ** -0.8  # skewed sources
    popularity = popularity[torch.randperm(n_cols, generator=g)]
    col = torch.multinomial(popularity, row.numel(), replacement=True, generator=g) if row.numel() else row
    return CSR.from_coo(row.to(index_dtype), col.to(index_dtype), n_rows, n_cols).to(device)


def graph(name: str, device: str | torch.device = "cpu") -> CSR:
    """Small named graphs for the interpreter: a few dozen rows, a few hundred edges.

    ``empty-rows-int64``: a third of the rows have no edges, more columns than rows (halo).
    ``power-law-int32``: one row holds a quarter of the edges; int32 indices.
    """
    if name == "empty-rows-int64":
        return power_law_graph(24, 40, 4.0, seed=1, empty_fraction=0.35, device=device)
    if name == "power-law-int32":
        return power_law_graph(40, 40, 5.0, exponent=1.6, seed=2, index_dtype=torch.int32, device=device)
    if name == "no-edges":
        empty = torch.zeros(0, dtype=torch.int64)
        return CSR.from_coo(empty, empty, 5, 7).to(device)
    raise KeyError(name)


GRAPHS = ("empty-rows-int64", "power-law-int32")


def dense(csr: CSR, edge_weight: Tensor | None = None) -> Tensor:
    """The ``[n_rows, num_cols]`` dense matrix (duplicate edges add up), in float64."""
    w = torch.ones(csr.nnz, dtype=torch.float64) if edge_weight is None else edge_weight.double().cpu()
    out = torch.zeros(csr.n_rows, csr.num_cols, dtype=torch.float64)
    return out.index_put_((csr.row.long().cpu(), csr.col.long().cpu()), w, accumulate=True)


def leaf(shape: tuple[int, ...], dtype: torch.dtype, device: str | torch.device, seed: int) -> Tensor:
    """Random normal leaf tensor that requires grad."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(device=device, dtype=dtype).requires_grad_()


def grads(out: Tensor, inputs: list[Tensor], seed: int = 123, round_to: torch.dtype | None = None) -> list[Tensor]:
    """Gradients of ``<out, r>`` for a fixed random ``r`` (rounded to ``round_to`` first); missing ones are zeros."""
    if not inputs:
        return []
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(out.shape, generator=g).to(device=out.device, dtype=round_to or out.dtype).to(out.dtype)
    got = torch.autograd.grad(out, inputs, r, allow_unused=True)
    return [torch.zeros_like(t) if d is None else d for t, d in zip(inputs, got)]


def check(name: str, run: Callable[..., Tensor], reference: Callable[..., Tensor], inputs: dict[str, Tensor],
          rtol: float | None = None) -> None:
    """Compare ``run(**inputs)`` with ``reference`` on fp32 copies of the inputs: output and every gradient.

    Inputs that require grad get a gradient check each; ``rtol`` defaults to the output
    dtype's entry in :data:`RTOL`.
    """
    out = run(**inputs)
    rtol = RTOL[out.dtype] if rtol is None else rtol
    wanted = [k for k, t in inputs.items() if t.requires_grad]
    got = grads(out, [inputs[k] for k in wanted])
    ref_inputs = {k: _upcast(t) for k, t in inputs.items()}
    ref = reference(**ref_inputs)
    ref_got = grads(ref, [ref_inputs[k] for k in wanted], round_to=out.dtype)
    assert_close(f"{name}: output", ref, out, rtol)
    for k, ref_g, g in zip(wanted, ref_got, got):
        assert_close(f"{name}: grad {k}", ref_g, g, rtol)


def _upcast(t: Tensor) -> Tensor:
    """A leaf copy in at least fp32 that requires grad when ``t`` does."""
    copy = t.detach().float() if t.dtype in (torch.float16, torch.bfloat16) else t.detach().clone()
    return copy.requires_grad_(t.requires_grad)
