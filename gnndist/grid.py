"""The process grid: world, rank, device and every process group. Nothing else creates groups.

``init()`` reads the ``torchrun`` environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), which ``gnndist train --nproc N``
also sets for the ranks it spawns. A single process with no such environment gets a
solo grid whose collectives are no-ops.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from gnndist.errors import UserError


@dataclass
class ProcessGrid:
    """World and groups of one training run; the only place that creates process groups.

    Axis names: ``world`` (all ranks); for a layout with replication ``c`` (``P = q * c``,
    rank ``k = (i, j)`` with ``i = k // c``, ``j = k % c``): ``row`` — the ``c`` ranks of
    block row ``i`` (the replica group, where partial products are folded) and ``col`` —
    the ``q`` ranks of column slab ``j`` (where input rows are exchanged). 2D is the square
    case ``c = sqrt(P)``; 1D is ``c = 1`` (``col`` is the world). Every collective takes
    the axis it runs on; tensors live on ``grid.device``.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str = "none"
    timeout: float = 600.0
    _axes: dict = field(default_factory=dict, repr=False)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ------------------------------------------------------------------ groups
    def check_replication(self, c: int) -> None:
        """Raise a one-line error unless ``c`` divides the world size."""
        if c < 1 or self.world_size % c:
            raise UserError(f"--replication {c} must divide the number of ranks ({self.world_size})")

    def axes(self, c: int) -> dict[str, Axis]:
        """The ``row`` (size ``c``) and ``col`` (size ``P / c``) axes of this rank for replication ``c``.

        Groups are created on first use, by every rank in the same order (all of one kind
        of axis, then the other), as ``torch.distributed.new_group`` requires.
        """
        self.check_replication(c)
        if c not in self._axes:
            P, q = self.world_size, self.world_size // c
            i, j = divmod(self.rank, c)
            rows = [list(range(a * c, a * c + c)) for a in range(q)]
            cols = [list(range(b, P, c)) for b in range(c)]
            self._axes[c] = {"row": self._axis(rows, i, j), "col": self._axis(cols, j, i)}
        return self._axes[c]

    def _axis(self, members: list[list[int]], which: int, index: int) -> Axis:
        group = None
        if self.distributed:
            for m in members:  # every rank creates every group, in the same order
                g = dist.new_group(m) if len(m) < self.world_size else None
                if m is members[which]:
                    group = g
        return Axis(members[which], index, group)

    def axis(self, name: str, c: int = 1) -> Axis:
        """The named axis: ``world``, or ``row`` / ``col`` of replication ``c``."""
        if name == "world":
            return Axis(list(range(self.world_size)), self.rank, None)
        return self.axes(c)[name]

    # ------------------------------------------------------------------ collectives
    def all_reduce_(self, t: torch.Tensor, axis: str | Axis = "world", op: str = "sum") -> torch.Tensor:
        """Reduce ``t`` in place over ``axis`` (``sum`` or ``max``); no-op on one rank."""
        ax = self.axis(axis) if isinstance(axis, str) else axis
        if self.distributed and ax.size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=ax.group)
        return t

    def broadcast_(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Copy rank ``src``'s ``t`` to every rank of the world."""
        if self.distributed:
            dist.broadcast(t, src)
        return t

    def all_gather_object(self, obj) -> list:
        """Every rank's ``obj`` (picklable), in rank order, over the world."""
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def all_to_all_single(self, t: torch.Tensor, axis: str | Axis = "world") -> torch.Tensor:
        """Equal-split all-to-all of ``t`` over ``axis`` (used by the network probe)."""
        ax = self.axis(axis) if isinstance(axis, str) else axis
        if not self.distributed or ax.size == 1:
            return t.clone()
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t, group=ax.group)
        return out

    def synchronize(self) -> None:
        """Wait for the device (for timers); a no-op on CPU."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def destroy(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        self._axes.clear()


@dataclass(frozen=True)
class Axis:
    """One process-grid axis as this rank sees it: its members (world ranks), its index, its group.

    ``group`` is ``None`` for the world (and on one rank); collectives pass it on as is.
    """

    ranks: list[int]
    index: int
    group: object = None

    @property
    def size(self) -> int:
        return len(self.ranks)


def split_threads(local_world_size: int) -> int:
    """Give each rank on this machine an equal share of its cores (no oversubscription)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cores // max(1, local_world_size))
    torch.set_num_threads(threads)
    return threads


def pin_mmap_threshold(threshold: int = 1 << 20) -> bool:
    """Fix glibc's mmap threshold so tensors above ``threshold`` bytes are mmapped and returned on free.

    glibc raises the threshold (up to 32 MiB) after large frees; tensors below it are then
    carved from a fragmenting heap. A rank holding a 1/P slice has many tensors in that
    range, so its peak RSS would not shrink with P. No-op off glibc or when
    ``MALLOC_MMAP_THRESHOLD_`` is set by the user.
    """
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(-3, threshold))  # M_MMAP_THRESHOLD


def init(backend: str = "auto", timeout: float = 600.0) -> ProcessGrid:
    """Build the :class:`ProcessGrid` from the environment (torchrun or ``--nproc``).

    Args:
        backend: ``"auto"`` (NCCL when every rank has a GPU, gloo otherwise), ``"gloo"`` or ``"nccl"``.
        timeout: seconds a rank waits for missing peers or a collective before failing.
    """
    env = os.environ
    world = int(env.get("WORLD_SIZE", "1"))
    rank = int(env.get("RANK", "0"))
    local_rank = int(env.get("LOCAL_RANK", "0"))
    local_world = int(env.get("LOCAL_WORLD_SIZE", str(world)))
    split_threads(local_world)
    pin_mmap_threshold()
    # one decision for the whole job: NCCL only when every local rank has its own GPU, which
    # every rank of a machine computes alike (a per-rank choice mixes NCCL and gloo and hangs)
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= local_world
    if backend == "auto":
        backend = "nccl" if use_cuda else "gloo"
    if backend == "nccl" and not use_cuda:
        raise UserError(f"--backend nccl needs one GPU per local rank ({local_world} ranks, "
                        f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} GPUs); use --backend gloo")
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    grid = ProcessGrid(rank, world, local_rank, local_world, device, backend if world > 1 else "none", timeout)
    if world > 1 and not dist.is_initialized():
        for var in ("MASTER_ADDR", "MASTER_PORT"):
            if var not in env:
                raise UserError(f"WORLD_SIZE={world} but {var} is not set: launch with torchrun or --nproc")
        try:
            store = None
            if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
                # the elastic agent's store outlives a restart with the last attempt's addresses in it
                # (pytorch#167288): give every attempt keys of its own
                base = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), world, is_master=False,
                                     timeout=timedelta(seconds=timeout))
                store = dist.PrefixStore(f"gnndist/attempt{env.get('TORCHELASTIC_RESTART_COUNT', '0')}", base)
            dist.init_process_group(backend, init_method=None if store else "env://", store=store, rank=rank,
                                    world_size=world, timeout=timedelta(seconds=timeout))
            dist.barrier()
        except (RuntimeError, dist.DistError) as e:
            raise UserError(
                f"rank {rank}: could not form a group of {world} ranks within {timeout:g}s "
                f"(a peer never joined?): {str(e).splitlines()[0]}"
            ) from None
    return grid
