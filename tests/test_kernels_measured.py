"""Measured dispatch: when several paths fit, the fastest on this graph is timed once and kept."""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import importlib

import pytest
import torch
from gnndist.kernels import dispatch, spmm
from gnndist.kernels.spmm import reference
from gnndist.kernels.testing import graph


@pytest.mark.triton
@pytest.mark.parametrize("fastest", ["triton", "sparse"])
def test_fastest_fitting_path_is_chosen_once_and_cached(monkeypatch, fastest):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    monkeypatch.setattr(dispatch, "MEASURE_ON", (DEVICE,))
    monkeypatch.setitem(dispatch.ORDER, DEVICE, ("triton", "sparse", "reference"))
    timed = []

    def fake_time(fn, csr, args, reps=5):
        name = fn.__module__.rsplit(".", 1)[1]
        timed.append((name, torch.is_grad_enabled()))
        return 1.0 if name == fastest else 2.0

    monkeypatch.setattr(dispatch, "_time", fake_time)
    csr = graph("power-law-int32", DEVICE)
    x = torch.randn(csr.num_cols, 8, device=DEVICE, requires_grad=True)
    assert dispatch.select("spmm", csr, x, None, "sum")[0] == fastest
    assert sorted(n for n, _ in timed) == ["sparse", "triton"]  # reference never timed
    spmm(csr, x)
    spmm(csr, torch.randn(csr.num_cols, 7, device=DEVICE, requires_grad=True))  # same width bucket (8)
    with torch.no_grad():  # training and inference share the choice: it times the forward only
        spmm(csr, x)
    assert len(timed) == 2
    (choice, times), *_ = dispatch.choices(csr).values()
    assert choice == fastest and set(times) == {"triton", "sparse"}


@pytest.mark.triton
@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize(("forward", "backward"), [("triton", "sparse"), ("sparse", "triton")])
def test_backward_is_chosen_on_the_transpose_by_its_own_timing(monkeypatch, forward, backward, reduce):
    """A^T grad is timed on the transposed CSR: each direction runs its own fastest path, exactly."""
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    monkeypatch.setattr(dispatch, "MEASURE_ON", (DEVICE,))
    monkeypatch.setitem(dispatch.ORDER, DEVICE, ("triton", "sparse", "reference"))
    csr = graph("power-law-int32", DEVICE)
    csr_t, _ = csr.transpose()
    ran = []

    def fake_time(fn, timed_csr, args, reps=5):
        name = fn.__module__.rsplit(".", 1)[1]
        return 1.0 if name == (forward if timed_csr is csr else backward) else 2.0

    monkeypatch.setattr(dispatch, "_time", fake_time)
    for name in ("triton", "sparse"):
        module = importlib.import_module(f"gnndist.kernels.spmm.{name}")
        monkeypatch.setattr(module, "spmm", _recording(module.spmm, name, ran))
    x = torch.randn(csr.num_cols, 8, device=DEVICE, dtype=torch.float32, requires_grad=True)
    w = torch.rand(csr.nnz, device=DEVICE)
    out = spmm(csr, x, w, reduce)
    g = torch.randn_like(out)
    (gx,) = torch.autograd.grad(out, x, g)
    assert ran == [(forward, csr), (backward, csr_t)]
    assert dispatch.choices(csr_t)[("spmm", (torch.float32, 2, 8), (torch.float32, 1, 1), "sum")][0] == backward
    x64 = x.detach().double().requires_grad_()
    ref = reference.spmm(csr, x64, w.double(), reduce)
    (gref,) = torch.autograd.grad(ref, x64, g.double())
    torch.testing.assert_close(gx.double(), gref, rtol=1e-5, atol=1e-5)


@pytest.mark.triton
@pytest.mark.parametrize("impl", ["triton", "sparse"])
def test_a_forced_forward_keeps_its_path_backwards(monkeypatch, impl):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    monkeypatch.setattr(dispatch, "MEASURE_ON", (DEVICE,))
    monkeypatch.setitem(dispatch.ORDER, DEVICE, ("triton", "sparse", "reference"))
    monkeypatch.setattr(dispatch, "_time", lambda *a, **k: pytest.fail("timed a forced path"))
    ran = []
    for name in ("triton", "sparse"):
        module = importlib.import_module(f"gnndist.kernels.spmm.{name}")
        monkeypatch.setattr(module, "spmm", _recording(module.spmm, name, ran))
    csr = graph("power-law-int32", DEVICE)
    x = torch.randn(csr.num_cols, 8, device=DEVICE, requires_grad=True)
    spmm(csr, x, reduce="mean", impl=impl).sum().backward()
    assert [name for name, _ in ran] == [impl, impl]
    assert dispatch.pinned() is None  # nothing pinned outside the forced call


def _recording(fn, name, ran):
    def spmm(csr, *args):
        ran.append((name, csr))
        return fn(csr, *args)
    spmm.__module__ = fn.__module__  # dispatch's timing names a path by its module
    return spmm


def test_forced_path_is_not_timed(monkeypatch):
    monkeypatch.setattr(dispatch, "MEASURE_ON", ("cpu",))
    monkeypatch.setattr(dispatch, "_time", lambda *a, **k: pytest.fail("timed a forced path"))
    monkeypatch.setenv(dispatch.ENV_VAR, "sparse")
    csr = graph("power-law-int32")
    assert dispatch.select("spmm", csr, torch.randn(csr.num_cols, 4), None, "sum")[0] == "sparse"


@pytest.mark.triton
def test_a_path_that_fails_while_timed_is_skipped(monkeypatch):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    monkeypatch.setattr(dispatch, "MEASURE_ON", (DEVICE,))
    monkeypatch.setitem(dispatch.ORDER, DEVICE, ("triton", "sparse", "reference"))

    def fake_time(fn, csr, args, reps=5):
        if fn.__module__.endswith("triton"):
            raise RuntimeError("no kernel image for this GPU")
        return 1.0

    monkeypatch.setattr(dispatch, "_time", fake_time)
    csr = graph("power-law-int32", DEVICE)
    assert dispatch.select("spmm", csr, torch.randn(csr.num_cols, 4, device=DEVICE), None, "sum")[0] == "sparse"
    monkeypatch.setattr(dispatch, "_time", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("all broken")))
    with pytest.raises(RuntimeError, match="all broken"):
        dispatch.select("spmm", graph("empty-rows-int64", DEVICE), torch.randn(40, 4, device=DEVICE), None, "sum")
