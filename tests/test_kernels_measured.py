"""Measured dispatch: when several paths fit, the fastest on this graph is timed once and kept."""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import pytest
import torch
from gnndist.kernels import dispatch, spmm
from gnndist.kernels.testing import graph


@pytest.mark.triton
@pytest.mark.parametrize("fastest", ["triton", "sparse"])
def test_fastest_fitting_path_is_chosen_once_and_cached(monkeypatch, fastest):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    monkeypatch.setattr(dispatch, "MEASURE_ON", (DEVICE,))
    monkeypatch.setitem(dispatch.ORDER, DEVICE, ("triton", "sparse", "reference"))
    timed = []

    def fake_time(fn, csr, args, grad, reps=5):
        name = fn.__module__.rsplit(".", 1)[1]
        timed.append((name, grad))
        return 1.0 if name == fastest else 2.0

    monkeypatch.setattr(dispatch, "_time", fake_time)
    csr = graph("power-law-int32", DEVICE)
    x = torch.randn(csr.num_cols, 8, device=DEVICE, requires_grad=True)
    assert dispatch.select("spmm", csr, x, None, "sum")[0] == fastest
    assert sorted(timed) == [("sparse", True), ("triton", True)]  # reference never timed
    spmm(csr, x)
    spmm(csr, torch.randn(csr.num_cols, 7, device=DEVICE, requires_grad=True))  # same width bucket (8)
    assert len(timed) == 2
    with torch.no_grad():  # inference is its own key: forward time only
        spmm(csr, x)
    assert timed[2:] == [("sparse", False), ("triton", False)] or timed[2:] == [("triton", False), ("sparse", False)]
    (choice, times), *_ = dispatch.choices(csr).values()
    assert choice == fastest and set(times) == {"triton", "sparse"}


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

    def fake_time(fn, csr, args, grad, reps=5):
        if fn.__module__.endswith("triton"):
            raise RuntimeError("no kernel image for this GPU")
        return 1.0

    monkeypatch.setattr(dispatch, "_time", fake_time)
    csr = graph("power-law-int32", DEVICE)
    assert dispatch.select("spmm", csr, torch.randn(csr.num_cols, 4, device=DEVICE), None, "sum")[0] == "sparse"
    monkeypatch.setattr(dispatch, "_time", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("all broken")))
    with pytest.raises(RuntimeError, match="all broken"):
        dispatch.select("spmm", graph("empty-rows-int64", DEVICE), torch.randn(40, 4, device=DEVICE), None, "sum")
