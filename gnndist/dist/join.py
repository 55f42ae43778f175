"""Joining the job: from a :class:`~gnndist.dist.grid.Place` to this rank's :class:`~gnndist.dist.grid.ProcessGrid`.

:func:`join_group` does it in order:

1. the rank's threads (its share of the machine's cores, :func:`split_threads`) and glibc's mmap threshold;
2. the backend and device, one decision for the whole job (:func:`choose_backend`);
3. in a job spanning hosts under gloo, the interface gloo binds (:func:`gloo_interface`), set here as
   ``GLOO_SOCKET_IFNAME`` for every group the job creates (gloo reads nothing else) unless the user set it;
4. the world group (``init_process_group``; under the elastic agent, on a store of this attempt's own);
5. every rank's host (one all-gather), the collective check (``--check-collectives``) and the watchdog.

A single process (``Place()``) gets a solo grid and joins nothing. The place is read from the environment by
:func:`gnndist.launcher.place`; nothing here reads it.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from gnndist import machine
from gnndist.dist.grid import Place, ProcessGrid
from gnndist.dist.guards import CollectiveCheck, Watchdog
from gnndist.errors import UserError, first_line

log = logging.getLogger("gnndist")


def split_threads(local_world_size: int) -> int:
    """Give each rank on this machine an equal share of its cores (no oversubscription)."""
    threads = max(1, machine.cores() // max(1, local_world_size))
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


@dataclass(frozen=True)
class InterfaceChoice:
    """The interface gloo is told to bind (``GLOO_SOCKET_IFNAME``), and why: :func:`gloo_interface`."""

    name: str
    address: str
    master: str
    hostname: str
    resolves_to: tuple[str, ...]

    def line(self) -> str:
        said = ", ".join(self.resolves_to) or "no address"
        return (f"gloo binds {self.name} ({self.address}), this host's way to MASTER_ADDR {self.master}: its name "
                f"{self.hostname!r} resolves to {said}, which other hosts cannot reach (GLOO_SOCKET_IFNAME overrides)")


def gloo_interface(master_addr: str | None, chosen: str | None = None) -> InterfaceChoice | None:
    """The interface a rank of a job spanning hosts should give gloo, where gloo's own choice would fail; else None.

    Gloo binds the address this host's name resolves to. Where that is a loopback address (Debian's
    ``127.0.1.1``, many images' ``127.0.0.1``) or none of this host's, every rank publishes an address no other
    host can reach and the group fails (``Connection refused`` to ``127.0.0.1``) or hangs. Then the interface the
    route to ``MASTER_ADDR`` leaves by is the one the other hosts reach. ``None`` where the user ``chosen`` one
    (``GLOO_SOCKET_IFNAME``, :attr:`Place.gloo_ifname`), the name resolves to an address of this host's own, or
    ``MASTER_ADDR`` is a loopback address or unroutable.
    """
    if chosen or not master_addr:
        return None
    hostname = socket.gethostname()
    named = machine.resolve_ipv4(hostname)
    own = machine.interface_addresses()
    if any(a in own.values() and not a.startswith("127.") for a in named):
        return None
    master = next(iter(machine.resolve_ipv4(master_addr)), None)
    if master is None or master.startswith("127."):
        return None
    source = machine.route_source(master)
    name = next((n for n, a in own.items() if a == source), None)
    if name is None or source is None or source.startswith("127."):
        return None
    return InterfaceChoice(name, source, master_addr, hostname, tuple(named))


def _bind_gloo(place: Place) -> None:
    """Step 3: in a job spanning hosts, tell gloo the interface of :func:`gloo_interface` (rank 0 says why).

    Gloo takes its interface from ``GLOO_SOCKET_IFNAME`` alone, for the world group and every group created
    after it (the axes', the collective check's), so it is set here, before the world group, and only where
    the user left it unset.
    """
    choice = gloo_interface(place.master_addr, place.gloo_ifname)
    if choice is None:
        return
    os.environ.setdefault("GLOO_SOCKET_IFNAME", choice.name)
    if place.rank == 0:
        log.info(choice.line())


def _form_world(place: Place, backend: str, device: torch.device, timeout: float) -> None:
    """Step 4: ``init_process_group`` of ``place``'s world, on ``MASTER_ADDR:MASTER_PORT``; under the elastic
    agent (``TORCHELASTIC_USE_AGENT_STORE``), on the agent's store under keys of this attempt's own."""
    store = None
    if place.agent_store:
        # the elastic agent's store outlives a restart with the last attempt's addresses in it
        # (pytorch#167288): give every attempt keys of its own
        base = dist.TCPStore(place.master_addr, int(place.master_port), place.world, is_master=False,
                             timeout=timedelta(seconds=timeout))
        store = dist.PrefixStore(f"gnndist/attempt{place.restart}", base)
    extra = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, init_method=None if store else "env://", store=store, rank=place.rank,
                            world_size=place.world, timeout=timedelta(seconds=timeout), **extra)


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
    machine.pin_mmap_threshold()
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
            _bind_gloo(place)
        try:
            _form_world(place, backend, dev, timeout)
            dist.barrier()
            grid.hosts = tuple(grid.all_gather_object(machine.host_identity()))  # [P]: which ranks share a machine
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
