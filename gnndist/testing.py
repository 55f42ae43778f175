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


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, rtol: float = 1e-5, atol: float = 0.0) -> None:
    """Assert ``max|ref - out| <= rtol * max|ref| + atol``; the message names the tensor.

    ``atol`` is for tensors that are zero analytically (e.g. a bias followed by batch norm),
    where only rounding noise is left to compare.
    """
    assert ref.shape == out.shape, f"{name}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    diff = (ref.detach().double() - out.detach().double()).abs().max().item() if ref.numel() else 0.0
    scale = ref.detach().double().abs().max().item() if ref.numel() else 0.0
    assert diff <= rtol * scale + atol, (
        f"{name}: max abs diff {diff:.3e} > rtol {rtol:.1e} * {scale:.3e} + atol {atol:.1e} "
        f"(relative error {rel_err(ref, out):.3e})"
    )


HAS_CUDA = torch.cuda.is_available()
HAS_TRITON = importlib.util.find_spec("triton") is not None


def _rank_main(fn, rank: int, world: int, port: int, queue, args) -> None:
    import io
    import os
    import traceback

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    grid = None
    try:
        from gnndist.grid import init

        grid = init("gloo", timeout=120, device="cpu",
                    check_collectives=os.environ.get("GNNDIST_CHECK_COLLECTIVES", "1") != "0")  # CPU ranks: results compare with CPU references
        result = fn(grid, *args)
        buf = io.BytesIO()  # plain bytes: tensors must not travel as shared memory of a dying process
        torch.save(result, buf)
        queue.put((rank, True, buf.getvalue()))
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
    from gnndist.grid import free_port

    port = free_port()
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
    import io

    return [torch.load(io.BytesIO(results[r][1]), weights_only=False) for r in range(world_size)]


def shared_data(rel: str = "") -> str:
    """Path under the team's offline datasets: ``$GNNDIST_SHARED_DATA``, else ``shared/data`` beside the checkout."""
    import os

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.environ.get("GNNDIST_SHARED_DATA") or os.path.join(os.path.dirname(repo), "shared", "data")
    return os.path.join(root, rel)
