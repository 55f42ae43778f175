"""The process grid: world, rank, device and every process group. Nothing else creates groups.

:func:`join_group` forms the grid of a :class:`Place`: where the process stands in its job, which
:func:`gnndist.launcher.place` reads from the ``torchrun`` environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``; ``gnndist train --ranks N``
sets them for the ranks it spawns) and passes down. A single process (``Place()``) gets a solo grid
whose collectives are no-ops.

Every collective of the package goes through :class:`ProcessGrid`, which checks that its
tensors are on ``grid.device`` (what NCCL requires; a CPU run catches the mistake too) and,
when ranks share a GPU under gloo, stages them through host memory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

from gnndist.dist.guards import CollectiveCheck, Watchdog
from gnndist.dist.staging import StagedWork, to_host
from gnndist.errors import PeerFailed, UserError, first_line
from gnndist.machine import cores, gloo_interface, host_identity, pin_mmap_threshold

log = logging.getLogger("gnndist")


@dataclass(frozen=True)
class Place:
    """Where this process stands in its job, as its launcher (torchrun, ``--ranks``, or none) set it.

    Read from the environment in one place, :func:`gnndist.launcher.place`, and passed to :func:`join_group`.
    """

    rank: int = 0  # RANK
    world: int = 1  # WORLD_SIZE
    local_rank: int = 0  # LOCAL_RANK
    local_world: int = 1  # LOCAL_WORLD_SIZE
    master_addr: str | None = None  # MASTER_ADDR
    master_port: str | None = None  # MASTER_PORT
    agent_store: bool = False  # TORCHELASTIC_USE_AGENT_STORE: the elastic agent's store is the rendezvous
    restart: int = 0  # TORCHELASTIC_RESTART_COUNT
    launched: bool = False  # RANK and WORLD_SIZE were set: one rank of torchrun or of --ranks


@dataclass
class ProcessGrid:
    """World and groups of one training run; the only place that creates process groups.

    Axis names: ``world`` (all ranks); for a layout with replication ``c`` (``P = q * c``,
    rank ``k = (i, j)`` with ``i = k // c``, ``j = k % c``): ``row`` — the ``c`` ranks of
    block row ``i`` (the replica group, where partial products are folded) and ``col`` —
    the ``q`` ranks of column slab ``j`` (where input rows are exchanged). 2D is the square
    case ``c = sqrt(P)``; 1D is ``c = 1`` (``col`` is the world). Every collective takes
    the axis it runs on; tensors live on ``grid.device`` (checked by every collective).
    ``staged``: the backend cannot take ``device`` tensors (gloo with ranks sharing a GPU),
    so collectives copy them to host memory and the results back.
    ``checker``: with ``--check-collectives``, every collective is first compared across
    ranks (:class:`CollectiveCheck`); ``None`` otherwise.
    ``hosts``: every rank's host as its peers reach it (:func:`host_identity`), in rank order: which ranks
    share a machine, and the key of what a probe measured (:func:`gnndist.dist.probe.cache_key`).
    ``watchdog``: ends this rank when one of the grid's waits outlives ``timeout`` (:class:`Watchdog`).

    One value for the job: where ranks read something of their own that steers what collectives they enter
    (a file, a clock), :meth:`share` gives every rank rank 0's and :meth:`agree` also names the ranks whose
    own differed.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str = "none"
    timeout: float = 600.0
    staged: bool = False
    checker: CollectiveCheck | None = field(default=None, repr=False)
    hosts: tuple[str, ...] = ()
    watchdog: Watchdog | None = field(default=None, repr=False)
    _axes: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.device = torch.device(self.device)
        if self.device.type == "cuda" and self.device.index is None:  # tensors report cuda:k, never "cuda"
            self.device = torch.device("cuda", torch.cuda.current_device())
        if not self.hosts:
            self.hosts = (host_identity(),) * self.world_size  # one machine until join_group learns otherwise

    @property
    def num_hosts(self) -> int:
        return len(set(self.hosts))

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def describe(self) -> str:
        """How this job communicates, in one line (rank 0 logs it once)."""
        if not self.distributed:
            return f"one rank on {self.device}"
        if self.backend == "nccl":
            return f"nccl on {self.device} (one GPU per local rank)"
        if self.staged:
            gpus = torch.cuda.device_count()
            return (f"gloo, tensors staged through host memory ({self.local_world_size} ranks share "
                    f"{gpus} GPU{'s' * (gpus != 1)})")
        return f"gloo on {self.device}"

    # ------------------------------------------------------------------ groups
    def axes(self, c: int) -> dict[str, Axis]:
        """The ``row`` (size ``c``) and ``col`` (size ``P / c``) axes of this rank for replication ``c``.

        ``c`` divides the world size: the layout that asks has checked it (``Strategy.grid_shape``, the
        one check, whose error names the flag). Groups are created on first use, by every rank in the
        same order (all of one kind of axis, then the other), as ``torch.distributed.new_group`` requires.
        """
        if c not in self._axes:
            self._check("new_group", f"row/col c={c}")
            P, q = self.world_size, self.world_size // c
            i, j = divmod(self.rank, c)
            rows = [list(range(a * c, a * c + c)) for a in range(q)]
            cols = [list(range(b, P, c)) for b in range(c)]
            self._axes[c] = {"row": self._axis(rows, i, j, f"row (c={c})"),
                             "col": self._axis(cols, j, i, f"col (c={c})")}
        return self._axes[c]

    def _axis(self, members: list[list[int]], which: int, index: int, name: str) -> Axis:
        group = None
        if self.distributed:
            for m in members:  # every rank creates every group, in the same order
                g = self._new_group(m, name) if len(m) < self.world_size else None
                if m is members[which]:
                    group = g
        return Axis(members[which], index, group, name)

    def _new_group(self, members: list[int], name: str):
        """``dist.new_group(members)`` within ``--timeout`` (torch's own default is 30 minutes); a rank whose
        peers never come fails in one line naming the axis."""
        try:
            with self.waiting(f"new_group {name} of ranks {members}"):
                return dist.new_group(members, timeout=timedelta(seconds=self.timeout))
        except (RuntimeError, dist.DistError) as e:
            raise PeerFailed(f"rank {self.rank}: creating the {name} group of ranks {members} failed within "
                             f"--timeout {self.timeout:g}s: its peers never came (did the ranks choose different "
                             f"layouts? --check-collectives names it): {first_line(e)}") from None

    def axis(self, name: str, c: int = 1) -> Axis:
        """The named axis: ``world``, or ``row`` / ``col`` of replication ``c``."""
        if name == "world":
            return Axis(list(range(self.world_size)), self.rank, None)
        return self.axes(c)[name]

    # ------------------------------------------------------------------ collectives
    def check_devices(self, name: str, *tensors: Tensor) -> None:
        """Raise unless every tensor is on ``grid.device`` (NCCL needs it; checked on every backend)."""
        for t in tensors:
            if t.device != self.device:
                raise RuntimeError(f"grid.{name}: a tensor on {t.device} was handed to a collective on a grid "
                                   f"whose device is {self.device}; create it with device=grid.device")

    def _run(self, op, args: list[tuple[Tensor, str]], async_op: bool):
        """``op(*tensors)`` for ``args`` of ``(tensor, "in" | "out" | "inout")``; its work or ``None``.

        Staged: ``op`` runs on host copies (an ``"out"`` tensor gets an empty one) and the
        ``"out"`` / ``"inout"`` tensors are copied back on the work's ``wait()``.
        """
        if not self.staged:
            if async_op:
                return op(*(t for t, _ in args))
            with self.waiting(_op_name(op)):
                return op(*(t for t, _ in args))
        host = [to_host(t, copy=mode != "out") for t, mode in args]
        work = StagedWork(op(*host), [(t, h) for (t, mode), h in zip(args, host) if mode != "in"])
        if async_op:
            return work
        self.wait(work, _op_name(op))
        return None

    def wait(self, work, what: str = "a collective") -> None:
        """Wait for ``work`` (an async collective's) under the watchdog."""
        with self.waiting(what):
            work.wait()

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """Within it, this rank waits on its peers (``what``): the watchdog ends the rank if it lasts past
        ``--timeout``. Nested waits count as the outermost."""
        if self.watchdog is None:
            yield
            return
        with self.watchdog.waiting(what):
            yield

    def all_reduce_(self, t: Tensor, axis: str | Axis = "world", op: str = "sum", async_op: bool = False):
        """Reduce ``t`` in place over ``axis`` (``sum`` or ``max``); no-op on one rank.

        Returns ``t``, or with ``async_op`` the work to ``wait()`` on (``None`` on one rank).
        """
        self.check_devices("all_reduce_", t)
        ax = self.axis(axis) if isinstance(axis, str) else axis
        if not (self.distributed and ax.size > 1):
            return None if async_op else t
        self._check(f"all_reduce_({op})", ax)
        red = dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM
        work = self._run(_named(lambda h: dist.all_reduce(h, op=red, group=ax.group, async_op=async_op),
                                f"all_reduce on {ax.name}"), [(t, "inout")], async_op)
        return work if async_op else t

    def broadcast_(self, t: Tensor, src: int = 0) -> Tensor:
        """Copy rank ``src``'s ``t`` to every rank of the world."""
        self.check_devices("broadcast_", t)
        if self.distributed:
            self._check(f"broadcast_(src={src})", "world")
            self._run(_named(lambda h: dist.broadcast(h, src), "broadcast"), [(t, "inout")], False)
        return t

    def all_gather_object(self, obj) -> list:
        """Every rank's ``obj`` (picklable), in rank order, over the world."""
        if not self.distributed:
            return [obj]
        self._check("all_gather_object", "world")
        out = [None] * self.world_size
        with self.waiting("all_gather_object"):
            dist.all_gather_object(out, obj)
        return out

    def share(self, obj):
        """Rank 0's ``obj`` on every rank (collective): what rank 0 alone read (a file) becomes the job's value."""
        return self.all_gather_object(obj)[0] if self.distributed else obj

    def agree(self, obj, what: str, must_match: bool = False):
        """Rank 0's ``obj`` on every rank (collective), where every rank has its own (read from a file, measured).

        Ranks whose own differs are named: a warning on rank 0, the job taking rank 0's value; with
        ``must_match`` a one-line :class:`UserError` on every rank instead (a value no rank may replace, such
        as the partition's META.json beside each rank's part). Compared as pickled bytes.
        """
        if not self.distributed:
            return obj
        every = self.all_gather_object(obj)
        first = pickle.dumps(every[0])
        differ = [k for k, v in enumerate(every) if pickle.dumps(v) != first]
        if differ:
            hosts = sorted({self.hosts[k] for k in differ})
            said = (f"rank{'s' * (len(differ) > 1)} {_ranks_text(differ)} (on {', '.join(hosts)}) had another "
                    f"{what} than rank 0 (on {self.hosts[0]})")
            if must_match:
                raise UserError(said)
            if self.is_main:
                log.warning(f"{said}; every rank takes rank 0's")
        return every[0]

    def all_to_all_single(self, out: Tensor, inp: Tensor, out_splits: list[int] | None = None,
                          in_splits: list[int] | None = None, axis: str | Axis = "world", async_op: bool = False):
        """All-to-all of ``inp`` into ``out`` over ``axis``, with rows per member (equal parts when ``None``).

        ``inp`` sends ``in_splits[k]`` rows to member ``k``; ``out`` receives ``out_splits[k]``
        rows from it. On one rank ``out`` is a copy of ``inp``.

        Returns the work to ``wait()`` on with ``async_op`` (``None`` on one rank), else ``None``.

        Shapes:
            inp ``[sum(in_splits), *]``, out ``[sum(out_splits), *]``
        """
        self.check_devices("all_to_all_single", out, inp)
        ax = self.axis(axis) if isinstance(axis, str) else axis
        if not self.distributed or ax.size == 1:
            out.copy_(inp)
            return None
        self._check("all_to_all_single", ax)
        return self._run(_named(lambda o, i: dist.all_to_all_single(o, i, out_splits, in_splits, group=ax.group,
                                                                    async_op=async_op), f"all_to_all on {ax.name}"),
                         [(out, "out"), (inp, "in")], async_op)

    def synchronize(self) -> None:
        """Wait for the device (for timers); a no-op on CPU."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.distributed:
            self._check("barrier", "world")
            with self.waiting("barrier"):
                dist.barrier()

    def _check(self, op: str, axis: Axis | str) -> None:
        """With ``--check-collectives``: compare this collective with every rank's next one (else nothing)."""
        if self.checker is not None:
            self.checker.check(op, axis if isinstance(axis, str) else axis.name)

    def check_agreement(self, what: str) -> None:
        """With ``--check-collectives``: every rank must say the same ``what`` here (a decision that steers the
        collectives to come, such as a layer's layout), else a :class:`CollectiveDesync` naming both; else nothing."""
        self._check(what, "world")

    def roll_call(self, wait: float = 5.0) -> str | None:
        """After a collective failed: which ranks can still be heard, through the job's store (a clause for the
        error line), or ``None`` when every rank answered or there is no store to ask.

        Every rank that gets here writes its rank under a key of this attempt and waits up to ``wait`` seconds
        for the others'. Ranks never heard are named with their hosts (their host or its link is down, or they
        are stuck outside a collective); a rank that cannot reach the store says so (its own link is down, or
        the store's host is).
        """
        if not self.distributed:
            return None
        try:
            store = dist.distributed_c10d._get_default_store()
        except (RuntimeError, ValueError, AttributeError):
            return None
        env = os.environ
        key = f"gnndist/roll/{env.get('TORCHELASTIC_RUN_ID', '')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        heard: dict[str, object] = {"missing": list(range(self.world_size))}

        def ask() -> None:  # in a thread: a store behind a cut link blocks past its own timeout
            try:
                store.set_timeout(timedelta(seconds=wait))
                store.set(f"{key}/{self.rank}", self.hosts[self.rank])
                deadline = time.monotonic() + wait
                missing = heard["missing"]
                while missing and time.monotonic() < deadline:
                    missing = [r for r in missing if not store.check([f"{key}/{r}"])]
                    heard["missing"] = missing
                    if missing:
                        time.sleep(0.2)
                heard["done"] = True
            except (RuntimeError, dist.DistError) as e:
                heard["error"] = first_line(e)

        asking = threading.Thread(target=ask, daemon=True, name="gnndist-roll-call")
        asking.start()
        asking.join(wait + 2.0)
        if "done" not in heard:
            why = heard.get("error", f"no answer within {wait + 2.0:g}s")
            return (f"this rank ({self.hosts[self.rank]}) could not reach the job's store: its host's link is down, "
                    f"or the store's host is ({why})")
        missing = heard["missing"]
        if not missing:
            return None
        hosts = sorted({self.hosts[r] for r in missing})
        return (f"no word from rank{'s' * (len(missing) > 1)} {_ranks_text(missing)} on {', '.join(hosts)} within "
                f"{wait:g}s: their host or its link is down, or they are stuck outside a collective")

    def destroy(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None
        if self.checker is not None:
            self.checker.close()  # a rank still waiting in a collective hears that this one has left
            self.checker = None
        if dist.is_initialized():
            dist.destroy_process_group()
        self._axes.clear()


def _ranks_text(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def _named(fn, name: str):
    fn.__gnndist_name__ = name
    return fn


def _op_name(fn) -> str:
    return getattr(fn, "__gnndist_name__", "a collective")


@dataclass(frozen=True)
class Axis:
    """One process-grid axis as this rank sees it: its members (world ranks), its index, its group.

    ``group`` is ``None`` for the world (and on one rank); collectives pass it on as is.
    """

    ranks: list[int]
    index: int
    group: object = None
    name: str = "world"  # the same on every rank: ``world``, ``row`` or ``col``

    @property
    def size(self) -> int:
        return len(self.ranks)


def together(grid: ProcessGrid, action: Callable[[], object] | None, peer_failed: str):
    """Run ``action`` (a local one, on the ranks that have one) and fail on every rank at once if it raised.

    The ranks agree through one all-reduce of a failure flag: the rank whose ``action`` raised a
    ``UserError`` raises it, the others a :class:`~gnndist.errors.PeerFailed` saying ``peer_failed``.
    """
    result, error = None, None
    try:
        result = action() if action is not None else None
    except UserError as e:
        error = e
    failed = grid.all_reduce_(torch.tensor([float(error is not None)], device=grid.device))
    if error is not None:
        raise error
    if failed.item() > 0:
        raise PeerFailed(f"rank {grid.rank}: {peer_failed}")
    return result


def split_threads(local_world_size: int) -> int:
    """Give each rank on this machine an equal share of its cores (no oversubscription)."""
    threads = max(1, cores() // max(1, local_world_size))
    torch.set_num_threads(threads)
    return threads


def choose_backend(backend: str, local_rank: int, local_world: int, gpus: int,
                   device: str = "auto") -> tuple[str, torch.device, bool]:
    """One decision for the whole job: ``(backend, device, staged)`` of this rank.

    NCCL only when every local rank has a GPU of its own (``gpus >= local_world``), a rule
    every rank of a machine evaluates alike (a per-rank choice mixes NCCL and gloo and
    hangs); otherwise gloo for all ranks. Under gloo with a GPU, ranks still compute on
    it (``cuda:local_rank % gpus``) and their collectives are staged through host memory.

    Args:
        backend: ``"auto"``, ``"gloo"`` or ``"nccl"`` (``--backend``).
        local_rank, local_world: this rank on its machine, and the ranks on it.
        gpus: GPUs this process sees.
        device: ``"auto"`` (a GPU when there is one) or ``"cpu"`` (never a GPU).
    """
    if device == "cpu":
        gpus = 0
    own = gpus > 0 and gpus >= local_world
    if backend == "auto":
        backend = "nccl" if own else "gloo"
    if backend == "nccl" and not own:
        raise UserError(f"--backend nccl needs one GPU per rank ({local_world} ranks on this machine, {gpus} GPUs); "
                        f"use --backend gloo")
    if gpus == 0:
        return backend, torch.device("cpu"), False
    return backend, torch.device("cuda", local_rank % gpus), backend == "gloo"


def join_group(place: Place, backend: str = "auto", timeout: float = 600.0, device: str = "auto",
               check_collectives: bool = False, on_stuck: Callable[[str], None] | None = None) -> ProcessGrid:
    """Build the :class:`ProcessGrid` of ``place`` (``gnndist.init()`` is this with the environment's place).

    Args:
        place: where this process stands (:func:`gnndist.launcher.place`); ``Place()``: one rank alone.
        backend: ``"auto"`` (NCCL when every local rank has a GPU of its own, gloo otherwise),
            ``"gloo"`` or ``"nccl"``; see :func:`choose_backend`.
        timeout: seconds a rank waits for missing peers or a collective before failing.
        device: ``"auto"`` (a GPU when there is one) or ``"cpu"``.
        check_collectives: compare every collective across ranks before it runs (:class:`CollectiveCheck`).
        on_stuck: called with the rank's last line when a wait outlives ``timeout`` (:class:`Watchdog`).
    """
    world, rank, local_rank, local_world = place.world, place.rank, place.local_rank, place.local_world
    split_threads(local_world)
    pin_mmap_threshold()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend, dev, staged = choose_backend(backend, local_rank, local_world, gpus, device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    distributed = world > 1
    grid = ProcessGrid(rank, world, local_rank, local_world, dev, backend if distributed else "none", timeout,
                       staged and distributed)
    if distributed and not dist.is_initialized():
        for var, value in (("MASTER_ADDR", place.master_addr), ("MASTER_PORT", place.master_port)):
            if value is None:
                raise UserError(f"WORLD_SIZE={world} but {var} is not set: launch with torchrun or --ranks")
        if backend == "gloo" and local_world < world:  # several hosts: the address gloo publishes must reach them
            choice = gloo_interface(place.master_addr)
            if choice is not None:
                os.environ["GLOO_SOCKET_IFNAME"] = choice.name
                if rank == 0:
                    log.info(choice.line())
        try:
            store = None
            if place.agent_store:
                # the elastic agent's store outlives a restart with the last attempt's addresses in it
                # (pytorch#167288): give every attempt keys of its own
                base = dist.TCPStore(place.master_addr, int(place.master_port), world, is_master=False,
                                     timeout=timedelta(seconds=timeout))
                store = dist.PrefixStore(f"gnndist/attempt{place.restart}", base)
            extra = {"device_id": dev} if backend == "nccl" else {}
            dist.init_process_group(backend, init_method=None if store else "env://", store=store, rank=rank,
                                    world_size=world, timeout=timedelta(seconds=timeout), **extra)
            dist.barrier()
            grid.hosts = tuple(grid.all_gather_object(host_identity()))  # [P]: which ranks share a machine
            if check_collectives:  # after the set-up's own collectives: the checker counts the run's from 1
                grid.checker = CollectiveCheck(world, timeout)
        except (RuntimeError, dist.DistError) as e:
            raise UserError(
                f"rank {rank}: could not form a group of {world} ranks within {timeout:g}s "
                f"(a peer never joined?): {first_line(e)}"
            ) from None
    if distributed:
        grid.watchdog = Watchdog(rank, timeout, on_stuck)
    return grid
