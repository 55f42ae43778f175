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
    """World and groups of one training run. Axis names: ``world`` (all ranks)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str = "none"
    timeout: float = 600.0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce_(self, t: torch.Tensor) -> torch.Tensor:
        """Sum ``t`` over the world in place (no-op on one rank)."""
        if self.distributed:
            dist.all_reduce(t)
        return t

    def broadcast_(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        if self.distributed:
            dist.broadcast(t, src)
        return t

    def all_gather_object(self, obj) -> list:
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def destroy(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


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
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() > local_rank
    if backend == "auto":
        backend = "nccl" if use_cuda else "gloo"
    if backend == "nccl" and not use_cuda:
        raise UserError(f"--backend nccl needs a GPU for local rank {local_rank}; use --backend gloo")
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    grid = ProcessGrid(rank, world, local_rank, local_world, device, backend if world > 1 else "none", timeout)
    if world > 1 and not dist.is_initialized():
        for var in ("MASTER_ADDR", "MASTER_PORT"):
            if var not in env:
                raise UserError(f"WORLD_SIZE={world} but {var} is not set: launch with torchrun or --nproc")
        try:
            dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                                    timeout=timedelta(seconds=timeout))
            dist.barrier()
        except (RuntimeError, dist.DistError) as e:
            raise UserError(
                f"rank {rank}: could not form a group of {world} ranks within {timeout:g}s "
                f"(a peer never joined?): {str(e).splitlines()[0]}"
            ) from None
    return grid
