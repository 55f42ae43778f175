"""Graphs, cases and error bounds for the kernel tests (``tests/test_kernels_*.py``).

Call :func:`use_interpreter` at the top of a test module, before anything imports a
Triton kernel: on a machine without CUDA it sets ``TRITON_INTERPRET=1`` so the Triton
kernels run on CPU tensors (Triton reads the variable when a kernel is decorated).

:func:`check` compares a kernel with a float64 reference element by element, allowing
the rounding error that fp32 accumulation of that element's terms can make (see there).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import Tensor

from .csr import CSR
from .settings import DTYPES as ALL_DTYPES

# unit roundoff of each output dtype; every kernel accumulates in fp32 (U_ACC)
UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-11,
                 torch.bfloat16: 2.0**-8}
U_ACC = 2.0**-24
C = 3  # slack over the first-order bound: one product per term, the output rounding
WIDTHS = (1, 37, 128)
DTYPES = {k: v for k, v in ALL_DTYPES.items() if k != "fp16"}  # the kernels' tested dtypes

# number of terms summed into each element: an int, or a tensor of one count per index of dim 0
Terms = int | Tensor
# (float64 inputs, float64 r) -> (S, R) of the output ("out") and of every gradient (by input name); R may
# leave keys out (then R = |reference|)
Magnitude = Callable[[dict[str, Tensor], Tensor], tuple[dict[str, Tensor], dict[str, Tensor]]]


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


def check(name: str, run: Callable[..., Tensor], reference: Callable[..., Tensor], inputs: dict[str, Tensor],
          terms: dict[str, Terms], magnitude: Magnitude | None = None, c: float = C) -> None:
    """Compare ``run(**inputs)`` with ``reference`` on float64 copies of the inputs: output and every gradient.

    The reference runs in float64 on the inputs' device (every float dtype upcasts
    exactly). Gradients are those of ``<out, r>`` for a fixed random ``r`` rounded to the
    output dtype; the reference gets the same rounded ``r``. Every element ``i`` of the
    output and of each gradient must satisfy::

        |got_i - ref_i| <= c * (u_acc * L_i * S_i + u_out * R_i) + tiny

    the forward-error bound of a sum of ``L`` terms accumulated in fp32 in any order
    (Higham, *Accuracy and Stability of Numerical Algorithms*, eq. 4.4:
    ``|fl(sum t) - sum t| <= L u sum |t|`` to first order), plus one rounding to the
    output dtype. ``L_i`` (``terms[...]``) is the number of terms summed into element
    ``i``: the row length for an SpMM output, the column length for its gradient in
    ``x`` (a sum over the transpose), the feature width for a dot product. ``S_i`` is
    the sum of the terms' absolute values, by default the float64 reference run on
    ``|inputs|`` and differentiated with ``|r|``, which is exactly that for sums of
    products (SpMM, SDDMM); ``magnitude`` gives the analogue for softmax and max.
    ``R_i`` is what the output-dtype roundings apply to: ``|ref_i|``, unless a kernel
    rounds an intermediate to the output dtype (the softmax backward reads its stored
    output). ``u_acc = 2^-24`` (fp32 accumulation), ``u_out`` the output dtype's unit
    roundoff (2^-24 fp32, 2^-8 bf16, 2^-11 fp16), ``tiny`` its smallest normal number
    (subnormals may flush to zero). ``c`` covers the product in each term and
    second-order terms. The bound does not depend on how a kernel tiles or splits a row,
    and it is relative to the terms, not the result, so cancellation does not break it;
    an error of one term in a row of ``L`` fails it while ``|t| > c L u_acc S``.

    Args:
        terms: ``L`` for ``"out"`` and for each input that requires grad: an int or one
            count per index of dim 0 (e.g. ``csr.in_degree()``).
        magnitude: ``(S, R)`` for the same keys (default :func:`abs_magnitude`).
        c: slack over the first-order bound (default :data:`C`).
    """
    out = run(**inputs)
    wanted = [k for k, t in inputs.items() if t.requires_grad]
    r = _direction(out)
    got = _grads(out, [inputs[k] for k in wanted], r)
    ref_inputs = {k: _float64(t) for k, t in inputs.items()}
    ref = reference(**ref_inputs)
    r64 = r.double()
    ref_got = _grads(ref, [ref_inputs[k] for k in wanted], r64)
    scale, rounded = (magnitude or abs_magnitude(reference))(ref_inputs, r64)
    assert_within(f"{name}: output", ref, out, terms["out"], scale["out"], rounded.get("out"), c)
    for k, ref_g, g in zip(wanted, ref_got, got):
        assert_within(f"{name}: grad {k}", ref_g, g, terms[k], scale[k], rounded.get(k), c)


def assert_within(name: str, ref: Tensor, got: Tensor, terms: Terms, scale: Tensor, rounded: Tensor | None = None,
                  c: float = C) -> None:
    """Assert ``|got - ref| <= c * (u_acc * terms * scale + u_out * rounded) + tiny`` elementwise (see :func:`check`).

    ``rounded`` defaults to ``|ref|``.
    """
    assert ref.shape == got.shape, f"{name}: shape {tuple(got.shape)} != reference {tuple(ref.shape)}"
    if not ref.numel():
        return
    u_out = UNIT_ROUNDOFF[got.dtype]
    u_acc = UNIT_ROUNDOFF[torch.float64] if got.dtype == torch.float64 else U_ACC
    length = _per_element(terms, ref)
    rounded = ref.detach().double().abs() if rounded is None else rounded.detach().double()
    tol = c * (u_acc * length * scale.detach().double() + u_out * rounded) + torch.finfo(got.dtype).tiny
    err = (got.detach().double() - ref.detach().double()).abs()
    bad = ~(err <= tol)  # NaN fails too
    if bad.any():
        ratio = torch.where(bad & err.isnan(), float("inf"), err / tol)
        i = int(ratio.flatten().argmax())
        where = tuple(int(j) for j in torch.unravel_index(torch.tensor(i), ref.shape))
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {ref.numel()} elements exceed c (u_acc L + u_out) S; worst at {where}: "
            f"got {got.flatten()[i].item():.9g}, reference {ref.flatten()[i].item():.9g}, "
            f"|diff| {err.flatten()[i].item():.3e} > tol {tol.flatten()[i].item():.3e} "
            f"(L {length.expand_as(ref).flatten()[i].item():g}, S {scale.flatten()[i].item():.3e}, c {c:g})")


def abs_magnitude(reference: Callable[..., Tensor]) -> Magnitude:
    """``S`` of a sum of products (SpMM, SDDMM): the reference and its gradients on ``|inputs|`` and ``|r|``;
    ``R = |ref|``."""

    def magnitude(inputs: dict[str, Tensor], r: Tensor) -> dict[str, Tensor]:
        absolute = {k: t.detach().abs().requires_grad_(t.requires_grad) for k, t in inputs.items()}
        out = reference(**absolute)
        wanted = [k for k, t in absolute.items() if t.requires_grad]
        return {"out": out.detach(), **dict(zip(wanted, _grads(out, [absolute[k] for k in wanted], r.abs())))}, {}

    return magnitude


def selection_magnitude(reference: Callable[..., Tensor]) -> Magnitude:
    """``S`` of a selection (segment max): the output is one of the inputs, so it must be exact
    (``S = R = 0``); the gradient sums ``|r|`` over the selected edges (the reference differentiated
    with ``|r|``), so a gradient sent to another edge fails."""

    def magnitude(inputs: dict[str, Tensor], r: Tensor) -> dict[str, Tensor]:
        fresh = {k: t.detach().requires_grad_(t.requires_grad) for k, t in inputs.items()}
        out = reference(**fresh)
        wanted = [k for k, t in fresh.items() if t.requires_grad]
        zero = torch.zeros_like(out)
        return {"out": zero, **dict(zip(wanted, _grads(out, [fresh[k] for k in wanted], r.abs())))}, {"out": zero}

    return magnitude


def softmax_magnitude(csr: CSR) -> Magnitude:
    """``S`` of a segment softmax ``y = exp(s - m) / sum_row exp(s - m)`` (``m`` the row max).

    All terms are positive, so ``S = y`` up to the rounding of ``s - m``, which changes
    ``exp`` by ``u |s - m|`` relatively: ``S_out = k y`` with ``k_e = 1 + |s_e - m| +
    sum_row y |s - m|``. The gradient ``y (g - sum_row y g)`` is computed from the stored
    ``y`` (rounded to the output dtype), so ``S_grad = R_grad = y (k (|g| + sum_row y |g|) +
    sum_row k y |g|)``.
    """

    def magnitude(inputs: dict[str, Tensor], r: Tensor) -> dict[str, Tensor]:
        s = inputs["scores"].detach().reshape(csr.nnz, -1)  # [nnz, H]
        g = r.abs().reshape(s.shape)  # [nnz, H]
        row = csr.row.long()

        def row_sum(v: Tensor) -> Tensor:  # [nnz, H] -> every edge's row sum, [nnz, H]
            return v.new_zeros((csr.n_rows, v.shape[1])).index_add_(0, row, v)[row]

        index = row.unsqueeze(1).expand_as(s)
        m = s.new_full((csr.n_rows, s.shape[1]), float("-inf")).scatter_reduce(0, index, s, "amax")[row]
        ex = (s - m).exp()
        y = ex / row_sum(ex)
        dist = (s - m).abs()
        k = 1.0 + dist + row_sum(y * dist)
        grad = y * (k * (g + row_sum(y * g)) + row_sum(k * y * g))
        shape = inputs["scores"].shape
        return {"out": (k * y).reshape(shape), "scores": grad.reshape(shape)}, {"scores": grad.reshape(shape)}

    return magnitude


def _per_element(terms: Terms, like: Tensor) -> Tensor:
    """``terms`` as float64 broadcastable to ``like``: a tensor ``[n]`` becomes ``[n, 1, ...]``."""
    if isinstance(terms, Tensor):
        return terms.to(device=like.device, dtype=torch.float64).reshape((-1,) + (1,) * (like.dim() - 1))
    return torch.tensor(float(terms), dtype=torch.float64, device=like.device)


def _direction(out: Tensor, seed: int = 123) -> Tensor:
    """The fixed random ``r`` of ``<out, r>``, rounded to the output dtype."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(out.shape, generator=g).to(device=out.device, dtype=out.dtype)


def _grads(out: Tensor, inputs: list[Tensor], r: Tensor) -> list[Tensor]:
    """Gradients of ``<out, r>`` with respect to ``inputs``; missing ones are zeros."""
    if not inputs:
        return []
    got = torch.autograd.grad(out, inputs, r, allow_unused=True)
    return [torch.zeros_like(t) if d is None else d for t, d in zip(inputs, got)]


def _float64(t: Tensor) -> Tensor:
    """A float64 leaf copy (exact for every float dtype) that requires grad when ``t`` does."""
    copy = t.detach().double() if t.is_floating_point() else t.detach().clone()
    return copy.requires_grad_(t.requires_grad)
