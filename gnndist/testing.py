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


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(fn, rank: int, world: int, port: int, queue, args) -> None:
    import os
    import traceback

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    grid = None
    try:
        from gnndist.grid import init

        grid = init("gloo", timeout=120)
        queue.put((rank, True, fn(grid, *args)))
    except BaseException:  # report every rank's error to the parent
        queue.put((rank, False, traceback.format_exc()))
    finally:
        if grid is not None:
            grid.destroy()


def run_distributed(fn, world_size: int, *args, timeout: float = 300.0) -> list:
    """Run ``fn(grid, *args)`` on ``world_size`` gloo CPU ranks; return each rank's result in rank order.

    One rank runs in this process with a solo grid. Otherwise ranks are spawned processes
    (``fn`` must be importable at module level); if any rank fails, the error names every
    failing rank with its traceback.
    """
    import multiprocessing as mp
    import queue as queue_mod

    if world_size == 1:
        from gnndist.grid import ProcessGrid

        return [fn(ProcessGrid(), *args)]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(fn, r, world_size, port, q, args)) for r in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, tuple[bool, object]] = {}
    try:
        while len(results) < world_size:
            try:
                rank, ok, value = q.get(timeout=timeout)
            except queue_mod.Empty:
                missing = sorted(set(range(world_size)) - set(results))
                raise AssertionError(f"ranks {missing} did not finish within {timeout:g}s") from None
            results[rank] = (ok, value)
            if not ok:
                break
    finally:
        for p in procs:
            p.join(timeout=5 if len(results) == world_size else 1)
            if p.is_alive():
                p.terminate()
    errors = [f"rank {r}:\n{v}" for r, (ok, v) in sorted(results.items()) if not ok]
    if errors:
        raise AssertionError("distributed run failed\n" + "\n".join(errors))
    return [results[r][1] for r in range(world_size)]
