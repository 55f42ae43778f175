"""Test helpers shared by the test suite: relative-error comparison and capability markers."""

from __future__ import annotations

import contextlib

import torch

from gnndist.kernels.dispatch import triton_installed


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


def assert_clean(data) -> None:
    """A loaded graph as every loader must give it: symmetric, sorted by (row, col), no duplicates, no self-loops,
    the contract's dtypes, and :func:`gnndist.datasets.validate`'s checks."""
    from gnndist.datasets import validate

    ei, n = data.edge_index, data.num_nodes
    assert ei.dtype == torch.int64 and data.x.dtype == torch.float32 and data.y.dtype == torch.int64
    assert not bool((ei[0] == ei[1]).any())
    key = ei[0] * n + ei[1]
    assert bool((key[1:] > key[:-1]).all())  # strictly increasing: sorted and unique
    assert torch.equal(torch.sort(ei[1] * n + ei[0]).values, key)
    assert isinstance(data.name, str) and isinstance(data.num_classes, int)
    validate(data)


HAS_CUDA = torch.cuda.is_available()
# The partition of tests that check what the ranks compute (every partition is exact): plain METIS with
# node balance, a fraction of a second, where the default search (``--method auto --balance auto``) takes
# seconds per graph. The partitioners' own tests use the defaults.
QUICK_PARTITION = dict(method="metis", balance="nodes")
HAS_TRITON = triton_installed()


def _rank_main(fn, rank: int, world: int, port: int, queue, args) -> None:
    import io
    import os
    import traceback

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    grid = None
    try:
        from gnndist.launcher import init

        grid = init("gloo", timeout=120, device="cpu")  # CPU ranks: results compare with CPU references
        result = fn(grid, *args)
        buf = io.BytesIO()  # plain bytes: tensors must not travel as shared memory of a dying process
        torch.save(result, buf)
        queue.put((rank, True, buf.getvalue()))
    except BaseException:  # report every rank's error to the parent
        queue.put((rank, False, traceback.format_exc()))
    finally:
        if grid is not None:
            grid.destroy()


def _pool_worker(rank: int, world: int, tasks, results) -> None:
    """One pooled rank: run each task it is sent (as :func:`_rank_main` does for a fresh rank) until ``None``.

    Not a daemon (a rank may start processes of its own): it leaves when told, or when its parent is gone.
    """
    import os
    import queue as queue_mod
    import sys

    parent = os.getppid()
    while True:
        try:
            task = tasks.get(timeout=5.0)
        except queue_mod.Empty:
            if os.getppid() != parent:
                return  # the test run that owned this pool is gone
            continue
        if task is None:
            return
        runner, fn, args, port, env, path = task
        os.environ.clear()
        os.environ.update(env)  # the parent's environment at the call, as a fresh spawn would inherit it
        sys.path[:] = path
        runner(fn, rank, world, port, results, args)


def _pool_context():
    """Where pooled ranks start: forked from a forkserver that imported torch once, so a rank skips torch's import
    (about 2 s of CPU with ``spawn``); the server forks nothing else and holds no threads. ``spawn`` where the
    platform has no forkserver."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch"])  # effective before the server's first start
    return ctx


class _RankPool:
    """``world`` ranks (:func:`_pool_context`) kept alive between calls, so a test pays Python's start-up once.

    Each call forms a new process group on a fresh port with the parent's current environment,
    exactly as a fresh spawn would; the processes (their imports and caches) are what is reused.
    A call that every rank answered, with an error or not, leaves the pool as it was (each rank
    destroyed its group); after a dead rank or a timeout (a rank may still wait in a collective)
    the pool is closed and the next call spawns a new one.
    """

    def __init__(self, world: int):
        ctx = _pool_context()
        self.world = world
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(world)]
        self.procs = [ctx.Process(target=_pool_worker, args=(r, world, self.tasks[r], self.results))
                      for r in range(world)]
        for p in self.procs:
            p.start()

    def run(self, runner, fn, args: tuple, timeout: float, grace: float = 0.0) -> dict[int, tuple[bool, object]]:
        """Every rank's ``(ok, value)`` of ``runner(fn, rank, world, port, queue, args)``.

        Stops at a dead rank, at ``timeout``, or ``grace`` seconds after the first failing rank
        (what the others said by then is kept).
        """
        import os
        import queue as queue_mod
        import sys
        import time

        from gnndist.machine import free_port

        port = free_port()
        for q in self.tasks:
            q.put((runner, fn, args, port, dict(os.environ), list(sys.path)))
        results: dict[int, tuple[bool, object]] = {}
        deadline = time.monotonic() + timeout
        while len(results) < self.world:
            try:
                rank, ok, value = self.results.get(timeout=1.0)
            except queue_mod.Empty:
                if any(not ok for ok, _ in results.values()):
                    break  # the grace after a failure is over
                dead = [r for r, p in enumerate(self.procs) if not p.is_alive() and r not in results]
                if dead:
                    raise AssertionError(f"ranks {dead} died (exit codes "
                                         f"{[self.procs[r].exitcode for r in dead]})") from None
                if time.monotonic() > deadline:
                    missing = sorted(set(range(self.world)) - set(results))
                    raise AssertionError(f"ranks {missing} did not finish within {timeout:g}s") from None
                continue
            results[rank] = (ok, value)
            if not ok and grace <= 0:
                break
            if not ok:
                deadline = min(deadline, time.monotonic() + grace)
        return results

    def close(self, wait: float = 5.0) -> None:
        for q, p in zip(self.tasks, self.procs):
            if p.is_alive():
                q.put(None)
        for p in self.procs:
            p.join(timeout=wait)
            if p.is_alive():
                p.terminate()
                p.join(timeout=1)


_POOLS: dict[int, _RankPool] = {}  # world size -> its live pool (a cache of processes; closed at exit)


def _close_pools() -> None:
    while _POOLS:
        _POOLS.popitem()[1].close()


def run_distributed(fn, world_size: int, *args, timeout: float = 300.0) -> list:
    """Run ``fn(grid, *args)`` on ``world_size`` gloo CPU ranks; return each rank's result in rank order.

    One rank runs in this process with a solo grid. Otherwise the ranks are spawned processes
    kept for the next call of the same world size (``fn`` must be importable at module level;
    each call forms a fresh process group with the caller's current environment); if any rank
    fails, the error names every failing rank with its traceback (a rank that never answered replaces the pool).
    """
    if world_size == 1:
        from gnndist.dist.grid import ProcessGrid

        return [fn(ProcessGrid(), *args)]
    import io

    results = _on_pool(_rank_main, fn, world_size, args, timeout)
    errors = [f"rank {r}:\n{v}" for r, (ok, v) in sorted(results.items()) if not ok]
    if errors:
        raise AssertionError("distributed run failed\n" + "\n".join(errors))
    return [torch.load(io.BytesIO(results[r][1]), weights_only=False) for r in range(world_size)]


def _on_pool(runner, fn, world_size: int, args: tuple, timeout: float, grace: float = 0.0) -> dict:
    """``runner`` on the pool of ``world_size`` ranks (started on first use); a pool whose rank died, timed out or
    did not answer is replaced."""
    import atexit

    pool = _POOLS.get(world_size)
    if pool is None:
        if not _POOLS:
            atexit.register(_close_pools)
        pool = _POOLS[world_size] = _RankPool(world_size)
    try:
        results = pool.run(runner, fn, args, timeout, grace)
    except BaseException:
        _POOLS.pop(world_size).close(wait=1.0)
        raise
    if len(results) < world_size:
        _POOLS.pop(world_size).close(wait=1.0)  # a rank that did not answer may still wait in a collective
    return results  # every rank answered (failed or not): each left its group and waits for the next task


@contextlib.contextmanager
def _captured_output():
    """This process's standard output and error, at the descriptor level, into two files; yields their texts'
    reader (what a spawned rank would have printed to the terminal it inherited)."""
    import os
    import sys
    import tempfile

    files = [tempfile.TemporaryFile(mode="w+b") for _ in range(2)]
    saved = [os.dup(1), os.dup(2)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(files[0].fileno(), 1)
    os.dup2(files[1].fileno(), 2)

    def texts() -> tuple[str, str]:
        sys.stdout.flush()
        sys.stderr.flush()
        out = []
        for f in files:
            f.seek(0)
            out.append(f.read().decode(errors="replace"))
        return out[0], out[1]

    try:
        yield texts
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        for f in files:
            f.close()


def _launched_rank_main(fn, rank: int, world: int, port: int, queue, args) -> None:
    """One rank of :func:`pooled_elastic`: what the launcher's spawned rank does, on a pooled process.

    Sends ``(payload, stdout, stderr)``: the payload is the result's bytes (rank 0) or the error record.
    """
    import io
    import os

    from gnndist.launcher import failure_record, run_here

    user_args, opts = args
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_RESTART_COUNT="0")
    with _captured_output() as texts:
        try:
            result = run_here(fn, user_args, opts)
            buf = io.BytesIO()  # plain bytes, as _rank_main sends them
            torch.save(result if rank == 0 else None, buf)
            ok, payload = True, buf.getvalue()
        except Exception as e:  # as the launcher's own rank reports it
            ok, payload = False, failure_record(e, rank)
        out, err = texts()
    queue.put((rank, ok, (payload, out, err)))


@contextlib.contextmanager
def pooled_launches():
    """Within it, :func:`gnndist.launch` starts its ranks on pooled processes (:func:`pooled_elastic`);
    a launch with restarts still goes through the elastic agent."""
    from gnndist.launcher import elastic_start, ranks_started_by

    def start(fn, args, ranks, max_restarts, opts):
        if max_restarts:
            return elastic_start(fn, args, ranks, max_restarts, opts)
        return pooled_elastic(fn, args, ranks, opts)

    with ranks_started_by(start):
        yield


def pooled_elastic(fn, args: tuple, ranks: int, opts):
    """A stand-in for the launcher's elastic start (:func:`gnndist.launcher.elastic_start`, no restarts) on pooled
    ranks.

    For tests of what the ranks compute, not of how they start (the ``pooled_ranks`` fixture):
    the same rank body (:func:`gnndist.launcher.run_here`), the same
    :class:`~gnndist.errors.RanksFailed` (the earliest own error, else a peer's), without an
    elastic agent or fresh processes. What the ranks print is written to this process's
    ``sys.stdout`` / ``sys.stderr`` after they finish, rank by rank.
    """
    import io
    import sys

    from gnndist.errors import RanksFailed
    from gnndist.launcher import root_cause

    results = _on_pool(_launched_rank_main, fn, ranks, (args, opts), timeout=max(opts.timeout, 1) + 60, grace=2.0)
    for rank in sorted(results):  # what the ranks printed, here (a test's capsys sees it)
        _, (_, out, err) = results[rank]
        sys.stdout.write(out)
        sys.stderr.write(err)
    results = {rank: (ok, payload) for rank, (ok, (payload, _, _)) in results.items()}
    failed = [record for ok, record in results.values() if not ok]  # the launcher's failure records
    if failed:
        raise RanksFailed(*root_cause(failed))
    return torch.load(io.BytesIO(results[0][1]), weights_only=False)


def shared_data(rel: str = "") -> str:
    """Path under the team's offline datasets: ``$GNNDIST_SHARED_DATA``, else ``shared/data`` beside the checkout."""
    import os

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.environ.get("GNNDIST_SHARED_DATA") or os.path.join(os.path.dirname(repo), "shared", "data")
    return os.path.join(root, rel)


def train_steps(trainer, on_step=None) -> list[float]:
    """``fit()``'s training steps, ``cfg.optim.epochs`` of them, without its per-epoch evaluation: each step's loss.

    ``on_step(epoch)``, if given, runs after each step (the step's gradients are still on the parameters)."""
    graph, cfg, losses = trainer.graph, trainer.cfg, []
    for epoch in range(cfg.optim.epochs):
        with graph.context.step(seed=cfg.run.seed, epoch=epoch):  # as Trainer.epoch
            losses.append(trainer.train_step(epoch))
        if on_step is not None:
            on_step(epoch)
    return losses


def record_steps(grid, partdir: str, cfg, dist) -> dict:
    """Train ``cfg.optim.epochs`` steps on one partition and keep what P-equality compares.

    ``dist``: the :class:`~gnndist.config.DistConfig` of the layout. The record: the owned rows'
    logits at the initial weights (the same for every P) and after the steps (eval mode, under the
    step's autocast), their original ids, every step's loss, the first step's gradients, the bytes
    of each exchange tag but the gradient all-reduce, and the fp16 steps skipped.
    :func:`p_differences` compares P ranks' records with one process's.
    """
    from gnndist.graph import DistGraph
    from gnndist.training.trainer import Trainer

    graph = DistGraph.from_config(*DistGraph.read(partdir, grid), grid, cfg, dist=dist)
    trainer = Trainer(graph, cfg)

    def logits():
        trainer.model.eval()
        with torch.no_grad(), trainer.precision.autocast():
            out = trainer.model(graph, graph.x).float()  # [n_owned, C]
        trainer.model.train()
        return out

    forward = logits()
    grads = {}

    def first_grads(epoch: int) -> None:
        if epoch == 0:
            grads.update({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})

    losses = train_steps(trainer, first_grads)
    after = logits()
    halo = {t: b for t, b in graph.context.counter.per_tag().items() if t != "grad_allreduce"}
    scaler = trainer.precision.scaler
    return dict(forward=forward, losses=losses, grads=grads, logits=after, ids=graph.orig_id[: graph.n_owned].clone(),
                halo_bytes=halo, skipped=scaler.skipped_total if scaler else 0)


def p_differences(ref: list[dict], ranks: list[dict], num_nodes: int) -> dict[str, float]:
    """Relative differences (max norm) of P ranks' :func:`record_steps` records from one process's.

    ``ref``, ``ranks``: the per-rank records (``ref`` of one rank). One step from the same weights
    (what the per-dtype bound covers): ``forward``, all nodes' logits at the initial weights;
    ``first_loss``, the first step's loss; ``grad``, the largest difference of any gradient entry over
    the model's largest gradient entry (an entry is a sum over nodes, rounded relative to its terms;
    a bias feeding a batch norm has an analytically zero gradient, so each tensor's own scale would be
    rounding over rounding). The trajectory: ``losses``, every step's loss; ``logits``, all nodes'
    logits after the steps.
    """
    one, got = ref[0], ranks[0]
    scale = max(g.abs().max().item() for g in one["grads"].values())
    grad = max((g.double() - got["grads"][n].double()).abs().max().item() for n, g in one["grads"].items()) / scale

    def gather(records, key):
        full = torch.full((num_nodes, records[0][key].shape[1]), float("nan"))
        for r in records:
            full[r["ids"]] = r[key]
        return full

    return dict(forward=rel_err(gather(ref, "forward"), gather(ranks, "forward")),
                first_loss=rel_err(torch.tensor(one["losses"][:1]), torch.tensor(got["losses"][:1])), grad=grad,
                losses=rel_err(torch.tensor(one["losses"]), torch.tensor(got["losses"])),
                logits=rel_err(gather(ref, "logits"), gather(ranks, "logits")))
