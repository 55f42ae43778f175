"""Start the ranks: in this process (one rank, or one rank of ``torchrun``) or ``--ranks N`` local ranks.

:func:`launch` runs any ``fn(grid, *args)`` on every rank (the public API, what ``gnndist
train`` uses with :func:`gnndist.train.train_rank`). ``ranks=N`` starts the ranks through PyTorch's own elastic launcher
(``torch.distributed.launcher.api.elastic_launch``, what ``torchrun`` runs), so the
training code path is the one ``torchrun`` gives, and:

* SIGINT / SIGTERM to the launcher stop every rank (the agent forwards the signal, then
  kills what is left) and the launcher exits 130 / 143 with one line; a rank also dies
  with its launcher (``PR_SET_PDEATHSIG``), so none is orphaned;
* when ranks fail together the launcher prints one line, the root cause: the earliest
  error of a rank that failed on its own, before any "a peer failed" of the others;
* ``--max-restarts R`` restarts the group after a failure; with ``--checkpoint`` the
  restarted ranks resume from the newest good checkpoint (as they do under ``torchrun
  --max-restarts``).

Failures reach the caller as exceptions: a :class:`~gnndist.errors.UserError` (one line), or
:class:`RanksFailed` / :class:`RanksStopped` with the line and exit code the CLI prints.

The rank environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``TORCHELASTIC_*``, ``GLOO_SOCKET_IFNAME``, ...)
is read here alone, into a :class:`~gnndist.dist.grid.Place` by :func:`place`, and ``GNNDIST_CHECK_COLLECTIVES``
by :func:`collectives_checked`; what starts the local ranks can be swapped for a while (:func:`ranks_started_by`:
the test pool does).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import torch

from gnndist.dist.grid import Place, ProcessGrid
from gnndist.dist.guards import roll_call
from gnndist.dist.join import choose_backend, join_group
from gnndist.errors import PeerFailed, RanksFailed, RanksStopped, UserError, first_line


def place(env: Mapping[str, str] = os.environ) -> Place:
    """Where this process stands in its job, from the rank environment torchrun (or ``--ranks``) sets: the one
    reader of ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_*``, ``TORCHELASTIC_*`` and
    ``GLOO_SOCKET_IFNAME`` (the user's choice, which :func:`~gnndist.dist.join.join_group` keeps)."""
    world = int(env.get("WORLD_SIZE", "1"))
    return Place(rank=int(env.get("RANK", "0")), world=world, local_rank=int(env.get("LOCAL_RANK", "0")),
                 local_world=int(env.get("LOCAL_WORLD_SIZE", str(world))), master_addr=env.get("MASTER_ADDR"),
                 master_port=env.get("MASTER_PORT"), agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
                 restart=int(env.get("TORCHELASTIC_RESTART_COUNT", "0") or 0),
                 launched="RANK" in env and "WORLD_SIZE" in env, run_id=env.get("TORCHELASTIC_RUN_ID", ""),
                 gloo_ifname=env.get("GLOO_SOCKET_IFNAME") or None)


def collectives_checked(env: Mapping[str, str] = os.environ) -> bool:
    """``GNNDIST_CHECK_COLLECTIVES=1``: every group this process forms checks its collectives, as
    ``--check-collectives`` does (the suite sets it for every rank it starts, the CLI's too); default off."""
    return env.get("GNNDIST_CHECK_COLLECTIVES", "0") not in ("", "0")


def under_torchrun() -> bool:
    """True when the launcher (torchrun or a spawned rank) already set the rank environment."""
    return place().launched


def restart_count() -> int:
    """How many times the elastic agent (``torchrun`` or ``--ranks``) restarted this group."""
    return place().restart


def init(backend: str = "auto", timeout: float = 600.0, device: str = "auto",
         check_collectives: bool = False) -> ProcessGrid:
    """This process's :class:`~gnndist.dist.grid.ProcessGrid`, from the environment (torchrun or ``--ranks``;
    none: one rank): :func:`~gnndist.dist.join.join_group` of :func:`place`, checking collectives also when
    ``GNNDIST_CHECK_COLLECTIVES=1``. The arguments are :func:`~gnndist.dist.join.join_group`'s."""
    return join_group(place(), backend, timeout, device, check_collectives or collectives_checked())


def _supported(cls, **kwargs) -> dict:
    """The keyword arguments ``cls`` (a dataclass) accepts: options newer torch versions added."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in kwargs.items() if k in names}


def collective_error(e: BaseException, rank: int, timeout: float) -> PeerFailed | None:
    """A one-line :class:`PeerFailed` for an exception raised by a collective, naming it; else None.

    The collective is the innermost ``torch.distributed`` call in the traceback, the
    operation the gnndist function that called it.
    """
    op = caller = None
    for frame, _ in traceback.walk_tb(e.__traceback__):
        name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        if frame.f_code.co_filename.endswith("distributed_c10d.py"):
            op = op or frame.f_code.co_name
        elif op is None and "gnndist" in frame.f_code.co_filename and not frame.f_code.co_filename.endswith("grid.py"):
            caller = name
    text = first_line(e)
    text = re.sub(r"^\[[^\]]*\]\s*", "", text).split(". This is typically")[0]  # gloo's source location, advice
    peer_words = ("gloo", "connection", "timed out", "timeout", "peer", "socket", "nccl", "broken pipe")
    if op is None and not any(w in text.lower() for w in peer_words):
        return None
    where = f"{op or 'a collective'}" + (f" in {caller}" if caller else "")
    return PeerFailed(f"rank {rank}: {where} failed: a peer rank died or did not answer within "
                      f"--timeout {timeout:g}s ({text})")


@dataclass(frozen=True)
class GroupOptions:
    """How the ranks form their group (``--backend``, ``--timeout``, ``--check-collectives``)."""

    backend: str = "auto"
    timeout: float = 600.0
    check_collectives: bool = False
    device: str = "auto"


def run_here(fn: Callable, args: tuple, opts: GroupOptions, on_stuck: Callable[[str], None] | None = None):
    """Join the group from the environment (torchrun, a spawned rank, or none: one rank), run ``fn(grid, *args)``.

    A failed collective becomes a one-line :class:`~gnndist.errors.PeerFailed` naming it; the group is
    destroyed however ``fn`` ends. ``on_stuck``: hears the rank's last line if a wait outlives ``--timeout``
    (:class:`~gnndist.dist.guards.Watchdog`), just before the rank exits.
    """
    import torch.distributed as dist

    here = place()
    logging.basicConfig(level=logging.INFO if here.rank == 0 else logging.WARNING, format="gnndist: %(message)s",
                        stream=sys.stderr)
    grid = join_group(here, opts.backend, opts.timeout, opts.device, opts.check_collectives, on_stuck)
    try:
        return fn(grid, *args)
    except (RuntimeError, dist.DistError) as e:
        peer = collective_error(e, grid.rank, opts.timeout)
        if peer is None:
            raise
        heard = roll_call(grid, here)  # which peers can still be heard: names the host whose link was cut
        raise (PeerFailed(f"{peer}; {heard}") if heard else peer) from None
    finally:
        grid.destroy()


def launch(fn: Callable, *args, ranks: int = 1, max_restarts: int = 0, backend: str = "auto",
           timeout: float = 600.0, check_collectives: bool = False, device: str = "auto"):
    """Run ``fn(grid, *args)`` on ``ranks`` local ranks (or on this rank of ``torchrun``); returns rank 0's result.

    The ranks start through PyTorch's elastic launcher (what ``torchrun`` runs), so the code
    path is the one ``torchrun`` gives; under ``torchrun`` (or with ``ranks=1``) ``fn`` runs in
    this process and every rank returns its own result. ``fn`` and ``args`` must be picklable
    (``fn`` defined at a module's top level; a script's ``main`` guarded by ``if __name__ == "__main__"``).

    Args:
        fn: the rank's body, ``fn(grid: ProcessGrid, *args)``.
        ranks: local ranks to start (``--ranks``); ignored under ``torchrun``.
        max_restarts: restarts of the whole group after a rank fails (``--max-restarts``).
        backend: ``"auto"``, ``"gloo"`` or ``"nccl"`` (:func:`gnndist.dist.join.join_group`, as the next three).
        timeout: seconds a rank waits for missing peers or a collective before failing (``--timeout``).
        check_collectives: compare every collective across ranks before it runs (``--check-collectives``).
        device: ``"auto"`` (a GPU when there is one) or ``"cpu"``.

    Raises:
        UserError: one line; :class:`RanksFailed` (its ``code``: 2 user error, 1 bug) when a spawned rank
            failed; :class:`RanksStopped` when a signal stopped them.
    """
    opts = GroupOptions(backend, timeout, check_collectives or collectives_checked(), device)
    if under_torchrun() or ranks == 1:
        return run_here(fn, args, opts)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    choose_backend(backend, 0, ranks, gpus)  # --backend nccl without a GPU per rank: one line, now
    return (_STARTER.get() or elastic_start)(fn, args, ranks, max_restarts, opts)


# starts local ranks: start(fn, args, ranks, max_restarts, opts) -> rank 0's result
Starter = Callable[[Callable, tuple, int, int, GroupOptions], object]
_STARTER: ContextVar[Starter | None] = ContextVar("gnndist_starter", default=None)  # None: elastic_start


@contextmanager
def ranks_started_by(start: Starter) -> Iterator[None]:
    """Within it, :func:`launch` starts its local ranks with ``start(fn, args, ranks, max_restarts, opts)``
    instead of :func:`elastic_start` (which ``start`` may still call, e.g. for a launch with restarts): the seam
    the test pool uses (:func:`gnndist.testing.pooled_launches`). The previous starter is back on exit."""
    token = _STARTER.set(start)
    try:
        yield
    finally:
        _STARTER.reset(token)


# ---------------------------------------------------------------------- spawned ranks
def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its launcher dies, whatever the cause (no orphans)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _error_path(errdir: str, rank: int) -> Path:
    return Path(errdir) / f"attempt{restart_count()}-rank{rank}.json"


# what the elastic agent puts in a rank's environment (LocalElasticAgent._start_workers, start_processes), besides
# the TORCHELASTIC_* names: a forked rank keeps these over the launcher's environment
AGENT_ENV = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
             "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
             "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")


def _start_method(fn: Callable) -> str:
    """How the agent starts ranks: forked from a forkserver that imported torch (and ``fn``'s module) once, so a
    rank skips torch's import (about 2 s of CPU a rank with ``spawn``); the server holds no threads and forks
    nothing else. ``spawn`` where the platform has no forkserver.

    The server is this process's one (multiprocessing's), started at its first use with the preloads set here;
    it ends when this process does, and a rank it forked dies with it (:func:`_die_with_parent`)."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return "spawn"
    module = getattr(fn, "__module__", None)
    mp.set_forkserver_preload(["__main__", "torch", __name__] + ([module] if module and module != "__main__" else []))
    return "forkserver"


def _leave_forkserver() -> None:
    """A forked rank lets go of the forkserver's "alive" pipe, which a forked child inherits: the server then ends
    when the launcher does (not when its last rank does), and its ranks with it (:func:`_die_with_parent`)."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    if server._forkserver_pid is None and server._forkserver_alive_fd is not None:  # a forked child's inherited fd
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None


def _worker(fn: Callable, args: tuple, opts: GroupOptions, errdir: str, env: dict[str, str], path: list[str]):
    """Entry point of one rank (run by the elastic agent): ``fn(grid, *args)``; rank 0 returns its result.

    The rank takes the launcher's environment and ``sys.path`` at the launch (``env``, ``path``: a forked rank
    would otherwise have the server's, from its start) with the agent's variables on top.
    A signal from the launcher ends the rank at once, without a traceback; a user error is
    written to ``errdir`` for the launcher to report once, and the rank exits 2; any other
    error prints its traceback, is written there too (the root cause before any peer's "a
    peer failed") and the rank exits 1.
    """
    _die_with_parent()
    _leave_forkserver()
    agent = {k: v for k, v in os.environ.items() if k in AGENT_ENV or k.startswith("TORCHELASTIC_")}
    os.environ.clear()
    os.environ.update({**env, **agent})
    sys.path[:] = path
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    rank = place().rank

    def stuck(line: str) -> None:  # the watchdog's last word, the rank's own error for the launcher's report
        _error_path(errdir, rank).write_text(json.dumps({"time": time.time(), "message": line, "secondary": False,
                                                         "code": 2}))

    try:
        result = run_here(fn, args, opts, stuck)
    except Exception as e:
        record = failure_record(e, rank)
        _error_path(errdir, rank).write_text(json.dumps(record))
        sys.stderr.flush()
        sys.exit(record["code"])
    atexit.register(exit_rank)  # after the agent has read the result: skip C++ teardown
    return result if rank == 0 else None


def failure_record(e: Exception, rank: int) -> dict:
    """What a failed rank tells the launcher: ``time``, one-line ``message``, ``secondary`` (a peer's failure
    seen here), ``code`` (2: a user error; 1: a bug, whose traceback is printed here, the agent would keep it)."""
    if isinstance(e, UserError):
        return {"time": time.time(), "message": str(e), "secondary": isinstance(e, PeerFailed), "code": 2}
    traceback.print_exc()
    return {"time": time.time(), "message": f"rank {rank}: {type(e).__name__}: {first_line(e, '')} (traceback above)",
            "secondary": False, "code": 1}


def exit_rank(code: int = 0) -> None:
    """End a rank's process at once, after flushing: its work is done and its group destroyed.

    A normal interpreter exit runs C++ static destructors, and gloo's threads can then abort
    the process ("terminate called without an active exception", SIGABRT) after a run that
    succeeded; the agent (or torchrun) would report a failed group, intermittently and under load.
    Registered with ``atexit`` by a spawned rank; called by ``gnndist.cli`` as a rank of torchrun.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _resource_tracker_running() -> bool:
    """Whether multiprocessing's helper process (the resource tracker) runs for this process."""
    from multiprocessing import resource_tracker

    return getattr(resource_tracker._resource_tracker, "_fd", None) is not None


def _stop_resource_tracker() -> None:
    """Stop and reap multiprocessing's helper process now, rather than leave it to outlive the launcher.

    Only the launcher's own (see :func:`elastic_start`): a helper the caller had already started tracks the
    caller's semaphores and shared memory, which stopping it would unlink. Not while this process has
    other multiprocessing children (the caller's own workers): they hold the helper's pipe, so it would
    not end, and waiting for it would hang.
    """
    import multiprocessing
    from multiprocessing import resource_tracker

    if multiprocessing.active_children():
        return
    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None:
        stop()


def root_cause(records: list[dict], killed: tuple[int, int] | None = None) -> tuple[str, int] | None:
    """The line and exit code of a failed group from its ranks' :func:`failure_record` s: the earliest own error,
    else ``killed`` (``(rank, signal)`` of the first rank a signal killed), else the earliest peer's error; None
    when there is nothing to say."""
    errors = sorted((r["time"], r["message"], r.get("code", 2)) for r in records if not r["secondary"])
    if errors:
        return errors[0][1], errors[0][2]
    if killed is not None:
        rank, sig = killed
        return f"rank {rank} was killed by {signal.Signals(sig).name}", 1
    peers = sorted((r["time"], r["message"]) for r in records)
    if peers:
        return peers[0][1], 2
    return None


def _root_cause(errdir: Path, failures: dict) -> tuple[str, int]:
    """:func:`root_cause` of the records the ranks of the last attempt wrote to ``errdir`` and the agent's failures."""
    records = []
    for path in errdir.glob("attempt*-rank*.json"):
        attempt, rank = (int(s) for s in path.stem.removeprefix("attempt").split("-rank"))
        records.append((attempt, json.loads(path.read_text())))
    last = max((a for a, _ in records), default=0)
    killed = sorted((f.timestamp, rank, -f.exitcode) for rank, f in failures.items() if (f.exitcode or 0) < 0)
    found = root_cause([r for a, r in records if a == last], killed[0][1:] if killed else None)
    if found is not None:
        return found
    rank, f = min(failures.items(), key=lambda kv: (kv[1].timestamp, kv[0]))
    return f"rank {rank} failed with exit code {f.exitcode} (its output is above)", 1


def elastic_start(fn: Callable, args: tuple, ranks: int, max_restarts: int, opts: GroupOptions):
    """Run ``fn(grid, *args)`` on ``ranks`` local ranks under PyTorch's elastic agent; rank 0's result."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from gnndist.machine import free_port

    tmp = Path(tempfile.mkdtemp(prefix="gnndist-launch-"))
    errdir = tmp / "errors"
    errdir.mkdir()
    lc = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=ranks, run_id=uuid.uuid4().hex,
        rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}",
        rdzv_configs={"timeout": int(max(opts.timeout, 1))},
        max_restarts=max_restarts, monitor_interval=0.1, start_method=_start_method(fn),
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp / "logs")),
        **_supported(LaunchConfig, shutdown_timeout=5),  # not in every torch (2.11 lacks it)
    )
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    tracker_ours = not _resource_tracker_running()  # else the caller's: it tracks the caller's own objects
    logging.disable(logging.CRITICAL)  # the agent's own logs; we print one line of our own
    stopped, failed = None, None
    try:
        results = elastic_launch(lc, _worker)(fn, args, opts, str(errdir), dict(os.environ), list(sys.path))
    except SignalException as e:
        stopped = int(e.sigval)
    except ChildFailedError as e:
        failed = _root_cause(errdir, e.failures)
    finally:
        logging.disable(logging.NOTSET)
        for s, h in handlers.items():
            signal.signal(s, h)
        shutil.rmtree(tmp, ignore_errors=True)
    # raised here, not in the handlers: the agent's exception (its frames hold the ranks' queues) is gone
    # before the resource tracker stops, so nothing it tracks is left to warn about at exit
    if tracker_ours:
        _stop_resource_tracker()
    if stopped is not None:
        raise RanksStopped(stopped, ranks)
    if failed is not None:
        raise RanksFailed(*failed)
    return results[0]
