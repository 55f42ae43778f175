"""The process grid: where this rank stands (world, rank, device, hosts), the groups of its axes, and every
collective of the package.

:func:`~gnndist.dist.join.join_group` forms the grid of a :class:`Place`: where the process stands in its job,
which :func:`gnndist.launcher.place` reads once from the ``torchrun`` environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_*``; ``gnndist train --ranks
N`` sets them for the ranks it spawns) and passes down. A single process (``Place()``) gets a solo grid whose
collectives are no-ops.

The groups of the layouts' axes are created here, on first use (:meth:`ProcessGrid.axes`); the world's by
:func:`~gnndist.dist.join.join_group`, and ``--check-collectives`` has a gloo group of its own
(:class:`~gnndist.dist.guards.CollectiveCheck`). Every collective of the package goes through
:class:`ProcessGrid`, which checks that its tensors are on ``grid.device`` (what NCCL requires; a CPU run catches
the mistake too) and, when ranks share a GPU under gloo, stages them through host memory.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

from gnndist.dist.guards import CollectiveCheck, Watchdog, ranks_text
from gnndist.dist.staging import StagedWork, to_host
from gnndist.errors import PeerFailed, UserError, first_line
from gnndist.machine import host_identity

log = logging.getLogger("gnndist")


@dataclass(frozen=True)
class Place:
    """Where this process stands in its job, as its launcher (torchrun, ``--ranks``, or none) set it.

    Read from the environment in one place, :func:`gnndist.launcher.place`, and passed to
    :func:`~gnndist.dist.join.join_group` (and to :func:`~gnndist.dist.guards.roll_call`, whose keys name the
    attempt).
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
    run_id: str = ""  # TORCHELASTIC_RUN_ID: the job's id, the same on every rank
    gloo_ifname: str | None = None  # GLOO_SOCKET_IFNAME: the interface the user told gloo to bind


@dataclass
class ProcessGrid:
    """Where this rank stands, the groups of its axes and its collectives, for one training run.

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
            said = (f"rank{'s' * (len(differ) > 1)} {ranks_text(differ)} (on {', '.join(hosts)}) had another "
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
