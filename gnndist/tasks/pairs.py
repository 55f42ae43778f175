"""Rows of a distributed table by global id, from whichever rank owns them: the pairs' one exchange.

A table is split over the ranks in contiguous ranges (``offsets``, ``[P + 1]``): the encoder's output
(a rank owns the new ids ``[offsets[r], offsets[r + 1])`` of the partition) and the directory that
turns dataset ids into new ids (rank ``r`` holds the new ids of dataset ids ``[r * H, (r + 1) * H)``).

    plan = fetch_plan(ids, offsets, grid)     # ids: sorted, unique; who asks whom for what (one exchange)
    rows = gather(h, plan, counter, "pairs")  # [len(ids), F], differentiable: gradients go home to the owners
    rows, locate = fetch_distinct(h, [pair_ids], n, offsets, grid)  # any ids: the distinct rows, and where

No rank holds a whole table: a rank receives the rows its own pairs name, once each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from gnndist.dist.comm import ExchangePlan, gather
from gnndist.dist.grid import ProcessGrid
from gnndist.errors import UserError


def fetch_plan(ids: Tensor, offsets: Tensor, grid: ProcessGrid) -> ExchangePlan:
    """The :class:`ExchangePlan` that brings the rows ``ids`` of a table split at ``offsets``, owned by *other*
    ranks, to this rank.

    Collective (two all-to-alls: the counts, then the ids). The rows arrive in the order of ``ids``
    (sorted ids are grouped by owner, owners in rank order).

    Shapes:
        ids ``[n]`` int64, sorted, unique, none of them this rank's; offsets ``[P + 1]`` int64
    """
    owner = torch.bucketize(ids, offsets[1:-1].to(ids.device), right=True)  # [n] rank owning each id
    recv_counts = torch.bincount(owner, minlength=grid.world_size)  # [P] rows this rank asks of each rank
    asked = torch.empty_like(recv_counts)
    grid.all_to_all_single(asked, recv_counts)  # [P] rows each rank asks of this one
    send_counts, recv_list = asked.tolist(), recv_counts.tolist()
    wanted = ids.new_empty(sum(send_counts))
    grid.all_to_all_single(wanted, ids.contiguous(), send_counts, recv_list)
    return ExchangePlan(wanted - int(offsets[grid.rank]), send_counts, recv_list, grid)


def fetch_rows(table: Tensor, ids: Tensor, offsets: Tensor, grid: ProcessGrid, counter=None,
               tag: str = "pairs") -> Tensor:
    """``table``'s rows of the global ``ids`` (any order, repeats allowed), from their owners; differentiable.

    :func:`fetch_distinct`'s rows, one per id. Shapes: table ``[n_owned, *]``; ids ``[*]`` int64  ->  ``[*ids, *]``
    """
    rows, locate = fetch_distinct(table, [ids], int(offsets[-1]), offsets, grid, counter, tag)
    return rows.take(locate(ids).reshape(-1)).view(*ids.shape, *table.shape[1:])


class Fetched(NamedTuple):
    """Distinct rows of a split table where they are: ``far``, the rows owned elsewhere (arrived once each), and
    ``near``, this rank's own range of the table, read in place (neither copied nor concatenated). Position ``p``
    is ``far[p]`` below ``len(far)``, else ``near[p - len(far)]``.

    Shapes:
        far ``[n_far, *]``, near ``[n_owned, *]``
    """

    far: Tensor
    near: Tensor

    @classmethod
    def local(cls, table: Tensor) -> Fetched:
        """A table's own rows alone: position ``p`` is row ``p``."""
        return cls(table[:0], table)

    @property
    def width(self) -> int:
        return self.near.shape[1]

    def take(self, pos: Tensor) -> Tensor:
        """The rows at positions ``pos`` (differentiable). ``[n]`` -> ``[n, *]``"""
        pos, n_far = pos.long(), self.far.shape[0]
        if n_far == 0:
            return self.near.index_select(0, pos)
        # every row from far (the near ones clamped to its last), then the near ones written over: one mask pass
        out = self.far.index_select(0, pos.clamp(max=n_far - 1))
        at_near = (pos >= n_far).nonzero().view(-1)
        return out.index_copy_(0, at_near, self.near.index_select(0, pos[at_near] - n_far))

    @staticmethod
    def add_at(grads: tuple[Tensor, Tensor], pos: Tensor, values: Tensor) -> None:
        """Add ``values`` (``[n, *]``) at positions ``pos`` into the gradients ``(far's, near's)``, in place. The
        positions are int64 for it: torch's CPU ``index_add_`` is 7x slower with int32 ones (65,536 rows of 16
        into 2M, one thread: 18.3 ms against 2.7 ms)."""
        (g_far, g_near), pos = grads, pos.long()
        n_far = g_far.shape[0]
        if n_far == 0:
            g_near.index_add_(0, pos, values)
            return
        far = pos < n_far
        g_far.index_add_(0, pos[far], values[far])
        g_near.index_add_(0, pos[~far] - n_far, values[~far])


def fetch_distinct(table: Tensor, ids: Sequence[Tensor], bound: int, offsets: Tensor, grid: ProcessGrid,
                   counter=None, tag: str = "pairs") -> tuple[Fetched, Callable[[Tensor], Tensor]]:
    """The distinct rows of ``table`` that the global ids of ``ids`` (tensors of any shape, ids in ``[0, bound)``)
    name, and ``locate``: any of those ids -> their positions (``rows.take(locate(t))`` are ``t``'s rows);
    differentiable.

    Collective on several ranks. Each distinct id owned elsewhere travels once (its gradient is summed and sent
    back to its owner); this rank's own rows are read where they are (:class:`Fetched`: no copy, no bytes).
    ``counter`` counts, under ``tag``, the ids asked for (8 bytes each) and the rows that answer them (forward), and
    the rows' gradients (backward). The rows are bounded by the nodes, not by the ids; a caller locates the ids a
    block at a time, so no position array as long as the ids is made.

    Shapes:
        table ``[n_owned, *]`` (this rank's range of the split); ids ``[*]`` int64  ->  far ``[n_far, *]``;
        ``locate``: ``[*]`` -> ``[*]`` (int32 where the distinct ids fit a map over ``[0, bound)``, else int64)
    """
    uniq = _distinct(ids, bound)
    lo, hi = int(offsets[grid.rank]), int(offsets[grid.rank + 1])
    if not grid.distributed:
        return Fetched.local(table), _locator(uniq, uniq - lo, bound)
    mine = (uniq >= lo) & (uniq < hi)
    plan = fetch_plan(uniq[~mine], offsets, grid)
    if counter is not None:  # the requests: one int64 id per row asked for
        counter.add(tag, "fwd", 8 * plan.n_recv, 8 * plan.n_send)
    far = gather(table, plan, counter, tag)  # [n_far, *]
    where = torch.empty_like(uniq)  # each distinct id's position: its row in far, or n_far + its row in table
    where[~mine] = torch.arange(far.shape[0], device=uniq.device)
    where[mine] = uniq[mine] - lo + far.shape[0]
    return Fetched(far, table), _locator(uniq, where, bound)


def _dense(bound: int, count: int) -> bool:
    """Whether a map over the id range ``[0, bound)`` (a flag and an int32 slot per id) costs less than sorting
    ``count`` ids: a range at most about twice the ids."""
    return bound <= 2 * count + 4096 and bound < 2**31


def _distinct(ids: Sequence[Tensor], bound: int) -> Tensor:
    """The sorted distinct ids of ``ids`` (each in ``[0, bound)``), int64: by a map over the range where
    :func:`_dense` (no copy of the ids is sorted), else by ``torch.unique``."""
    if not _dense(bound, sum(t.numel() for t in ids)):
        return torch.unique(torch.cat([t.reshape(-1) for t in ids])).long()
    seen = torch.zeros(bound, dtype=torch.bool, device=ids[0].device)
    for t in ids:
        seen[t.reshape(-1)] = True
    return seen.nonzero().view(-1)


def _locator(uniq: Tensor, where: Tensor, bound: int) -> Callable[[Tensor], Tensor]:
    """ids -> ``where`` at their position in ``uniq`` (sorted, distinct): an int32 slot per id of the range where
    :func:`_dense`, else a binary search."""
    if _dense(bound, 2 * uniq.shape[0]):
        slot = torch.empty(bound, dtype=torch.int32, device=uniq.device)
        slot[uniq] = where.int()
        return lambda t: slot[t]
    return lambda t: where[torch.searchsorted(uniq, t.long())]


class Directory:
    """Dataset id -> new id, held 1/P per rank: rank ``r`` answers for dataset ids ``[r * H, (r + 1) * H)``.

    Args:
        home: this rank's slice of the map (the partition's ``link_home``), new ids of its dataset ids.
        num_nodes: N, every node of the graph.
        grid: the process grid.

    Shapes:
        home ``[min(H, N - r * H)]`` int64 with ``H = ceil(N / P)``
    """

    def __init__(self, home: Tensor, num_nodes: int, grid: ProcessGrid):
        per = -(-num_nodes // grid.world_size)
        # int32 where every new id fits (the pairs it answers are then half the bytes in memory); else int64
        self.home = home.view(-1, 1).to(torch.int32 if num_nodes < 2**31 else torch.int64)
        self.num_nodes, self.grid = num_nodes, grid
        self.offsets = torch.tensor([min(r * per, num_nodes) for r in range(grid.world_size + 1)],
                                    dtype=torch.int64, device=home.device)

    def new_ids(self, ids: Tensor, what: str = "pairs", counter=None) -> Tensor:
        """The new ids of dataset ``ids`` (collective; ``what`` names them in the error of an id out of range;
        ``counter``: the run's byte counter, which counts the ids' answers under the tag ``directory``).

        Shapes:
            ids ``[*]`` int64  ->  ``[*]`` int32 (N < 2**31; else int64)
        """
        flat = ids.reshape(-1).long()
        bad = bool(self.grid.all_reduce_(torch.tensor(
            [float(flat.numel() > 0 and (int(flat.min()) < 0 or int(flat.max()) >= self.num_nodes))],
            device=flat.device)).item() > 0)
        if bad:
            lo, hi = (int(flat.min()), int(flat.max())) if flat.numel() else (0, 0)
            raise UserError(f"{what}: node ids must lie in [0, {self.num_nodes}) (the graph has {self.num_nodes:,} "
                            f"nodes); found ids in [{lo}, {hi}] on some rank")
        return fetch_rows(self.home, flat, self.offsets, self.grid, counter, "directory").view(ids.shape)
