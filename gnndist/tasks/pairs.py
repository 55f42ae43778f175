"""Rows of a distributed table by global id, from whichever rank owns them: the pairs' one exchange.

A table is split over the ranks in contiguous ranges (``offsets``, ``[P + 1]``): the encoder's output
(a rank owns the new ids ``[offsets[r], offsets[r + 1])`` of the partition) and the directory that
turns dataset ids into new ids (rank ``r`` holds the new ids of dataset ids ``[r * H, (r + 1) * H)``).

    plan = fetch_plan(ids, offsets, grid)     # ids: sorted, unique; who asks whom for what (one exchange)
    rows = gather(h, plan, counter, "pairs")  # [len(ids), F], differentiable: gradients go home to the owners
    rows, locate = fetch_distinct(h, [pair_ids], n, offsets, grid)  # any ids: each distinct row once, and where

No rank holds a whole table: a rank receives the rows its own pairs name, once each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
    return rows.index_select(0, locate(ids).reshape(-1)).view(*ids.shape, *table.shape[1:])


def fetch_distinct(table: Tensor, ids: Sequence[Tensor], bound: int, offsets: Tensor, grid: ProcessGrid,
                   counter=None, tag: str = "pairs") -> tuple[Tensor, Callable[[Tensor], Tensor]]:
    """The distinct rows of ``table`` that the global ids of ``ids`` (tensors of any shape, ids in ``[0, bound)``)
    name, from their owners, and ``locate``: any of those ids -> their rows' positions (``rows[locate(t)]`` are
    ``t``'s rows); differentiable.

    Collective on several ranks. Each distinct id owned elsewhere travels once (its gradient is summed and sent
    back to its owner); this rank's own rows do not travel (nor count as bytes). ``counter`` counts, under ``tag``,
    the ids asked for (8 bytes each) and the rows that answer them (forward), and the rows' gradients (backward).
    The rows are bounded by the nodes, not by the ids; a caller locates the ids a block at a time, so no position
    array as long as the ids is made.

    Shapes:
        table ``[n_owned, *]`` (this rank's range of the split); ids ``[*]`` int64  ->  ``[n_distinct, *]``;
        ``locate``: ``[*]`` -> ``[*]`` (int32 where the distinct ids fit a map over ``[0, bound)``, else int64)
    """
    uniq = _distinct(ids, bound)
    lo, hi = int(offsets[grid.rank]), int(offsets[grid.rank + 1])
    mine = (uniq >= lo) & (uniq < hi)
    if not grid.distributed:  # index_select: its backward is an index_add
        return table.index_select(0, uniq - lo), _locator(uniq, torch.arange(uniq.shape[0], device=uniq.device), bound)
    plan = fetch_plan(uniq[~mine], offsets, grid)
    if counter is not None:  # the requests: one int64 id per row asked for
        counter.add(tag, "fwd", 8 * plan.n_recv, 8 * plan.n_send)
    far = gather(table, plan, counter, tag)  # [n_far, *]
    where = torch.empty_like(uniq)  # each distinct id's row in [far; near]
    n_far, near = far.shape[0], uniq[mine] - lo
    where[~mine] = torch.arange(n_far, device=uniq.device)
    where[mine] = torch.arange(near.shape[0], device=uniq.device) + n_far
    return _FarAndNear.apply(table, far, near), _locator(uniq, where, bound)


class _FarAndNear(torch.autograd.Function):
    """``[far; table[near]]`` written once into one buffer (no copy of the near rows beside it, no concatenation);
    the backward splits the gradient: the far rows' to their owners, the near rows' added into ``table``'s."""

    @staticmethod
    def forward(ctx, table: Tensor, far: Tensor, near: Tensor) -> Tensor:
        out = far.new_empty((far.shape[0] + near.shape[0], *table.shape[1:]))
        out[: far.shape[0]] = far
        torch.index_select(table, 0, near, out=out[far.shape[0] :])
        ctx.save_for_backward(near)
        ctx.n_far, ctx.n_table = far.shape[0], table.shape[0]
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (near,) = ctx.saved_tensors
        g_table = grad.new_zeros((ctx.n_table, *grad.shape[1:])).index_add_(0, near, grad[ctx.n_far :])
        return g_table, grad[: ctx.n_far], None


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
