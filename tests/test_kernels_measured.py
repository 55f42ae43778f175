"""Measured dispatch: when several paths fit, the fastest on this graph is timed once and kept."""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import contextlib
import importlib

import pytest
import torch
from gnndist.kernels import dispatch, spmm
from gnndist.kernels.spmm import reference
from gnndist.kernels.testing import graph


@pytest.fixture
def timing():
    """``timing(fn)``: for the rest of the test the dispatcher times each path with ``fn(op, csr, args)`` (its
    seam, :func:`gnndist.kernels.dispatch.timed_by`)."""
    with contextlib.ExitStack() as stack:
        yield lambda fn: stack.enter_context(dispatch.timed_by(fn))


@pytest.fixture
def searched(monkeypatch) -> list:
    """The tiles of every ``triton_kernel.spmm_launch`` call from here on, which runs no kernel (an empty output of
    the right shape; the original is ``__wrapped__``): for the tile search's choices alone, timed by a fake timer.
    Every option's output is checked in ``test_every_tile_option_the_tuning_may_choose_is_exact``; each test that
    uses this ends with one real launch of the tiles it kept."""
    from gnndist.kernels.spmm import triton_kernel

    tiles_seen, launch = [], triton_kernel.spmm_launch

    def record(csr, x, *args, tiles=None, **kw):
        tiles_seen.append(tiles)
        return x.new_empty(csr.n_rows, x.shape[1])

    record.__wrapped__ = launch
    monkeypatch.setattr(triton_kernel, "spmm_launch", record)
    return tiles_seen


@pytest.fixture
def measured(monkeypatch):
    """Measured dispatch on this device, Triton first, nothing forced."""
    monkeypatch.delenv("GNNDIST_KERNEL", raising=False)  # the public ops' compatibility read (ops._compat)
    monkeypatch.setattr(dispatch, "MEASURE_ON", (DEVICE,))
    monkeypatch.setitem(dispatch.ORDER, DEVICE, ("triton", "sparse", "reference"))


@pytest.mark.triton
@pytest.mark.parametrize("fastest", ["triton", "sparse"])
def test_fastest_fitting_path_is_chosen_once_and_cached(measured, monkeypatch, fastest, timing):
    timed = []

    def fake_time(fn, csr, args, reps=5):
        name = fn.__module__.rsplit(".", 1)[1]
        timed.append((name, torch.is_grad_enabled()))
        return 1.0 if name == fastest else 2.0

    timing(fake_time)
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
def test_backward_is_chosen_on_the_transpose_by_its_own_timing(measured, monkeypatch, forward, backward, reduce,
                                                               timing):
    """A^T grad is timed on the transposed CSR: each direction runs its own fastest path, exactly."""
    csr = graph("power-law-int32", DEVICE)
    csr_t, _ = csr.transpose()
    ran = []

    def fake_time(fn, timed_csr, args, reps=5):
        name = fn.__module__.rsplit(".", 1)[1]
        return 1.0 if name == (forward if timed_csr is csr else backward) else 2.0

    timing(fake_time)
    _record_paths(monkeypatch, ran)
    x = torch.randn(csr.num_cols, 8, device=DEVICE, dtype=torch.float32, requires_grad=True)
    w = torch.rand(csr.nnz, device=DEVICE)
    out = spmm(csr, x, w, reduce, tune=False)  # on CUDA the tile tuning would run the Triton path too
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
def test_a_forced_forward_keeps_its_path_backwards(measured, monkeypatch, impl, timing):
    timing(lambda *a, **k: pytest.fail("timed a forced path"))
    ran = []
    _record_paths(monkeypatch, ran)
    csr = graph("power-law-int32", DEVICE)
    x = torch.randn(csr.num_cols, 8, device=DEVICE, requires_grad=True)
    spmm(csr, x, reduce="mean", impl=impl).sum().backward()
    assert [name for name, _ in ran] == [impl, impl]
    assert dispatch.pinned() is None  # nothing pinned outside the forced call


def _record_paths(monkeypatch, ran):
    """Each call of the triton or sparse SpMM appends ``(path, csr)`` to ``ran``."""
    for name in ("triton", "sparse"):
        module = importlib.import_module(f"gnndist.kernels.spmm.{name}")
        monkeypatch.setattr(module, "spmm", _recording(module.spmm, name, ran))


def _recording(fn, name, ran):
    def spmm(csr, *args):
        ran.append((name, csr))
        return fn(csr, *args)
    spmm.__module__ = fn.__module__  # dispatch's timing names a path by its module
    return spmm


def test_forced_path_is_not_timed(monkeypatch, timing):
    monkeypatch.setattr(dispatch, "MEASURE_ON", ("cpu",))
    timing(lambda *a, **k: pytest.fail("timed a forced path"))
    csr = graph("power-law-int32")
    assert dispatch.select("spmm", csr, torch.randn(csr.num_cols, 4), None, "sum", impl="sparse")[0] == "sparse"


@pytest.mark.triton
def test_a_path_that_fails_while_timed_is_skipped(measured, monkeypatch, timing):

    def fake_time(fn, csr, args, reps=5):
        if fn.__module__.endswith("triton"):
            raise RuntimeError("no kernel image for this GPU")
        return 1.0

    timing(fake_time)
    csr = graph("power-law-int32", DEVICE)
    assert dispatch.select("spmm", csr, torch.randn(csr.num_cols, 4, device=DEVICE), None, "sum")[0] == "sparse"
    timing(lambda *a, **k: (_ for _ in ()).throw(RuntimeError("all broken")))
    with pytest.raises(RuntimeError, match="all broken"):
        dispatch.select("spmm", graph("empty-rows-int64", DEVICE), torch.randn(40, 4, device=DEVICE), None, "sum")


@pytest.mark.triton
def test_the_fake_clock_reaches_other_threads(measured, timing):
    """On CUDA autograd runs a backward on a device thread of its own: the clock a test hands the dispatcher must
    time the paths chosen there too (the H200 run: A^T was timed by the real clock)."""
    import threading

    timed = []
    timing(lambda fn, csr, args, reps=5: timed.append(fn.__module__) or 1.0)
    csr = graph("power-law-int32", DEVICE)
    x = torch.randn(csr.num_cols, 8, device=DEVICE)
    t = threading.Thread(target=lambda: dispatch.select("spmm", csr, x, None, "sum", tune=False))
    t.start()
    t.join()
    assert len(timed) == 2  # both paths, by the fake clock, in the other thread


@pytest.mark.triton
def test_tune_false_reaches_the_backward(measured, monkeypatch, timing):
    """An unforced call with tune=False: both directions are timed, neither tunes its tiles."""
    from gnndist.kernels.spmm import triton as tk

    monkeypatch.setattr(tk, "tune", lambda *a: pytest.fail("tuned with tune=False"))
    timing(lambda fn, csr, args, reps=5: 1.0 if fn.__module__ == tk.__name__ else 2.0)
    csr = graph("power-law-int32", DEVICE)
    x = torch.randn(csr.num_cols, 8, device=DEVICE, requires_grad=True)
    spmm(csr, x, tune=False).sum().backward()
    assert [choice for choice, _ in dispatch.choices(csr.transposed()).values()] == ["triton"]  # the backward's CSR
    assert dispatch.tuning() is True  # nothing left behind outside the call


# ---------------------------------------------------------------------- tiles measured per graph
@pytest.mark.triton
def test_every_tile_option_the_tuning_may_choose_is_exact():
    from gnndist.kernels.spmm import triton_kernel, triton_tiles

    csr = graph("power-law-int32", DEVICE)  # one hub row of ~50 edges: chunked at C = 16
    base = (16, (2, 4), (2, 4), (4, 4), 4, 1)
    x = torch.randn(csr.num_cols, 8, device=DEVICE)
    w = torch.rand(csr.nnz, device=DEVICE)
    ref = reference.spmm(csr, x.double(), w.double(), "mean")
    options = {t for field, values in triton_tiles.TUNE_FIELDS for t in triton_tiles.tile_options(base, field, values)}
    assert len(options) >= 8
    for tiles in options:
        got = triton_kernel.spmm_launch(csr, x, w, mean=True, tiles=tiles)
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-6, msg=f"tiles {tiles}")


@pytest.mark.triton
def test_tuning_keeps_the_fastest_tiles_per_field_and_later_calls_use_them(monkeypatch, searched):
    from gnndist.kernels.spmm import triton as tk
    from gnndist.kernels.spmm import triton_kernel, triton_tiles

    launch = triton_kernel.spmm_launch.__wrapped__

    csr = graph("power-law-int32", DEVICE)
    monkeypatch.setattr(triton_tiles, "tiles_for", lambda feat: (16, (2, 4), (2, 4), (4, 4), 4, 1))
    best = {"D_S": 16, "C": 256, "warps": 2, "stages": 3}  # the fake GPU's fastest option of each field

    def timer(fn):
        fn()
        C, _, (_, dm), (_, ds), warps, stages = searched[-1]
        seen = {"D_S": ds, "C": C, "warps": warps, "stages": stages}
        return 1.0 + sum(v != seen[k] for k, v in best.items())  # one unit per field off its best

    x = torch.randn(csr.num_cols, 8, device=DEVICE)
    tiles = tk.tune_tiles(csr, x, timer=timer)
    assert tiles == (256, (2, 4), (2, 4), (1, 16), 2, 3)
    n = len(searched)
    assert tk.tune_tiles(csr, x, timer=lambda fn: pytest.fail("tuned twice")) == tiles  # cached on the CSR
    assert len(searched) == n
    assert triton_tiles.tuned(csr, x, None, False, 0) == tiles
    assert triton_tiles.tuned(csr, x, None, True, 0) is None  # mean is its own key
    assert min(triton_tiles.timings(csr, x, None, False, 0).items(), key=lambda kv: kv[1])[0] == tiles
    out = launch(csr, x)  # no tiles given: the tuned ones
    torch.testing.assert_close(out.double(), reference.spmm(csr, x.double()), rtol=1e-5, atol=1e-6)


@pytest.mark.triton
def test_a_tile_option_that_fails_is_skipped(monkeypatch):
    from gnndist.kernels.spmm import triton as tk
    from gnndist.kernels.spmm import triton_kernel, triton_tiles

    csr = graph("empty-rows-int64", DEVICE)
    monkeypatch.setattr(triton_tiles, "tiles_for", lambda feat: (16, (2, 4), (2, 4), (4, 4), 4, 1))
    launch = triton_kernel.spmm_launch

    def flaky(csr, x, *args, tiles=None, **kw):
        if tiles is not None and tiles[4] == 2:
            raise RuntimeError("out of resources: registers")
        return launch(csr, x, *args, tiles=tiles, **kw)

    monkeypatch.setattr(triton_kernel, "spmm_launch", flaky)
    timed = []

    def timer(fn):
        fn()
        timed.append(1)
        return 2.0 - 0.1 * len(timed)  # every later option looks faster: the failing one would win

    tiles = tk.tune_tiles(csr, torch.randn(csr.num_cols, 8, device=DEVICE), timer=timer)
    assert tiles[4] != 2


@pytest.mark.triton
def test_dispatch_lets_the_triton_path_tune_before_timing_it(measured, monkeypatch, timing):
    from gnndist.kernels.spmm import triton as tk

    events = []
    monkeypatch.setattr(tk, "tune", lambda csr, *args: events.append(("tune", csr)))
    timing(lambda fn, csr, args, reps=5: events.append(("time", fn.__module__)) or 1.0)
    csr = graph("power-law-int32", DEVICE)
    dispatch.select("spmm", csr, torch.randn(csr.num_cols, 4, device=DEVICE), None, "sum")
    assert events[:2] == [("tune", csr), ("time", tk.__name__)]
    assert ("tune", csr) not in events[2:]  # cuSPARSE has nothing to tune
    events.clear()  # per-head weights: only Triton fits, it is not timed but still tunes
    x = torch.randn(csr.num_cols, 2, 4, device=DEVICE)
    assert dispatch.select("spmm", csr, x, torch.rand(csr.nnz, 2, device=DEVICE), "sum")[0] == "triton"
    assert events == [("tune", csr)]
    events.clear()  # tune=False: nothing tunes, the paths are still timed
    dispatch.select("spmm", graph("empty-rows-int64", DEVICE), torch.randn(40, 4, device=DEVICE), None, "sum",
                    tune=False)
    assert [e for e, _ in events] == ["time", "time"]
    events.clear()  # forced: the fixed tiles, nothing measured
    dispatch.select("spmm", csr, torch.randn(csr.num_cols, 4, device=DEVICE), None, "sum", impl="triton")
    assert events == []


@pytest.mark.triton
def test_tuning_keeps_the_fixed_tiles_unless_another_set_is_faster_again(monkeypatch, searched):
    """A set that timed faster once by noise (and not again beside the fixed tiles) is not kept (issue 50)."""
    from gnndist.kernels.spmm import triton as tk
    from gnndist.kernels.spmm import triton_kernel, triton_tiles

    start = (16, (2, 4), (2, 4), (4, 4), 4, 1)
    monkeypatch.setattr(triton_tiles, "tiles_for", lambda feat: start)
    seen: dict = {}

    def noisy(fn):  # warps=2 times 0.5 the first time (noise), 1.2 after; everything else 1.0
        fn()
        tiles = searched[-1]
        seen[tiles] = seen.get(tiles, 0) + 1
        return (0.5 if seen[tiles] == 1 else 1.2) if tiles[4] == 2 else 1.0

    x = torch.randn(graph("power-law-int32", DEVICE).num_cols, 8, device=DEVICE)
    assert tk.tune_tiles(graph("power-law-int32", DEVICE), x, timer=noisy) == start
    within = lambda fn: (fn(), 0.97 if searched[-1][4] == 2 else 1.0)[1]  # noqa: E731 - 3 % faster: noise
    csr = graph("power-law-int32", DEVICE)
    assert tk.tune_tiles(csr, x, timer=within) == start
    out = triton_kernel.spmm_launch.__wrapped__(csr, x)  # the kept tiles, launched for real
    torch.testing.assert_close(out.double(), reference.spmm(csr, x.double()), rtol=1e-5, atol=1e-6)
