"""Refinement after METIS: boundary moves that lower the slowest ranks' modelled time and halo traffic.

METIS minimises the *total* communication volume (or the edge cut); a rank's time depends on
*its own* rows sent and received, ``max(send_k, recv_k)`` per exchange (:func:`gnndist.cost.spmm_time`),
and the slowest rank sets the pace. This pass moves boundary nodes to lower the largest
per-rank volume ``M = max_k max(send_k, recv_k)`` (and the total), in the spirit of the
volume-balancing refinement ("Graph-VB") the sparsity-aware CAGNET line ran after METIS.

One pass, all numpy, ``O(N P + boundary entries)`` (sparse counts: ``O(non-zero cells + boundary entries)``):

1. ``cnt[v, p]``: neighbours of ``v`` in part ``p`` (kept up to date move by move). Node ``v``
   of part ``a`` is sent once to every other part it has a neighbour in. A dense ``[N, P]`` table
   where it is small, its non-zero cells only above (:mod:`gnndist.partition.counts`: at
   ``P = 64`` on ogbn-papers100M the dense one would be 28 GB); the same moves either way.
2. Every boundary node ``v`` gets one candidate move, to the other part ``b`` holding most of its
   neighbours. Its exact effect on every part's send and receive volume *if it moved alone*:
   ``v``'s own row (``a`` stops sending it, ``b`` starts sending it to its other parts) and each
   neighbour ``u`` in part ``c`` (``a`` stops needing ``u`` when ``v`` was its last neighbour
   there; ``b`` starts needing ``u`` when ``v`` is its first).
   Nodes next to a critical part (send or receive at least ``theta * M``) also get a move into it.
3. A move is kept when it lowers the modelled time of the *time-critical* ranks (per layer, those
   within ``(1 - theta)`` of the spread below the slowest: their halo, row and nonzero terms of
   :func:`gnndist.cost.rank_layer_times`), or leaves it and lowers the summed volume of the
   volume-critical parts, or leaves both and lowers the total volume; and alone would push no part
   above ``M``. Best first (in that order), one move per node, no two moved nodes adjacent (their
   effects then nearly add up).
4. The longest prefix of those moves that keeps every balance constraint under its tolerance,
   no volume above ``M`` and no rank's modelled layer time above the slowest rank's.
5. The moves are applied and every count recomputed exactly; the pass is undone (and retried
   with half the moves) unless ``M`` did not grow, the modelled epoch time did not grow and
   the ranks' modelled times fell (:func:`_key`: the epoch, then leximax: the sorted per-rank
   times, slowest first), or stayed and ``(M, total volume)`` fell. One strict order: no cycles.

Then the *peer pruning* (:func:`prune_peers`): a rank pays a latency per peer, and at large P
with narrow layers the peers, not the rows, set its time. Two parts stay peers while one edge
joins them; where few nodes tie them, those nodes move (as a group, one node at a time with
exact bookkeeping, :class:`_Book`) to a third part that exchanges with their neighbours'
parts already. A group is kept when the modelled time falls (or holds while the ranks' times
fall leximax, slowest first), the tolerances hold, the maximum volume does not grow and the
total volume stays within :data:`VOLUME_GROWTH` of where the pruning began.

So, by construction, refinement never breaks a balance tolerance that held before, never
raises the maximum per-rank volume and never raises the modelled epoch time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from gnndist.partition.book import GlobalCSR, in_order
from gnndist.partition.counts import DenseCounts, part_counts

from gnndist.cost import Network, RankLoad, rank_layer_times

DENSE_CELLS = 1 << 24  # candidates per pass are capped so that [candidates, P] tables stay this small
CHUNK = 1 << 22  # adjacency entries processed at once (bounds the temporary arrays)
VOLUME_GROWTH = 1.1  # peer pruning may raise the total volume by at most this factor


def neighbour_part_counts(csr: GlobalCSR, assign: np.ndarray, parts: int) -> np.ndarray:
    """Neighbours of every node in every part, as a dense table (:class:`~gnndist.partition.counts.DenseCounts`).

    Shapes:
        -> ``[N, parts]`` int32
    """
    return DenseCounts(csr, assign, parts).table


def loads_from_counts(counts, assign: np.ndarray, degree: np.ndarray) -> list[RankLoad]:
    """The 1D halo exchange's :class:`~gnndist.cost.RankLoad` of every part, from neighbour-part counts
    (a :mod:`~gnndist.partition.counts` object, or a dense ``[N, P]`` table)."""
    counts = _as_counts(counts)
    parts = counts.parts
    pair = counts.send_pairs(assign)  # [src, dst] rows
    messages = np.maximum(np.count_nonzero(pair, axis=0), np.count_nonzero(pair, axis=1))
    nnz = np.bincount(assign, weights=degree, minlength=parts).astype(np.int64)
    rows = np.bincount(assign, minlength=parts)
    return [RankLoad(expand_send=int(pair[k].sum()), expand_recv=int(pair[:, k].sum()), messages=int(messages[k]),
                     nnz=int(nnz[k]), rows=int(rows[k])) for k in range(parts)]


def _as_counts(counts):
    return DenseCounts.of(counts) if isinstance(counts, np.ndarray) else counts


def _entries_of(rowptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the adjacency entries of ``nodes`` and, for each, the index of its node in ``nodes``."""
    lens = rowptr[nodes + 1] - rowptr[nodes]
    owner = np.repeat(np.arange(len(nodes), dtype=np.int64), lens)
    start = np.repeat(rowptr[nodes] - np.cumsum(lens) + lens, lens)
    return start + np.arange(len(owner), dtype=np.int64), owner


def unit_costs(widths: tuple[int, ...], net: Network) -> np.ndarray:
    """Per layer, the modelled seconds a rank spends per owned row, per nonzero, per halo row and per peer,
    read off :func:`gnndist.cost.rank_layer_times` (linear in each); ``[layers, 5]`` with the fixed part last."""
    units = [RankLoad(rows=1), RankLoad(nnz=1), RankLoad(expand_send=1), RankLoad(messages=1), RankLoad()]
    out = []
    for i, (f_in, f_out) in enumerate(zip(widths[:-1], widths[1:])):
        t = rank_layer_times(units, f_in, f_out, net, first=(i == 0))
        out.append(np.append(t[:4] - t[4], t[4]))
    return np.array(out)


def refine(
    csr: GlobalCSR,
    assign: np.ndarray,
    parts: int,
    weights: np.ndarray,
    tolerances: np.ndarray,
    widths: tuple[int, ...],
    net: Network,
    epoch_time: Callable[[list[RankLoad]], float],
    passes: int = 8,
    theta: float = 0.8,
    prune: bool = True,
    sparse: bool | None = None,
    threads: int = 1,
) -> tuple[np.ndarray, dict]:
    """Lower the maximum per-rank send/receive volume of ``assign`` (see the module docstring).

    Args:
        csr: symmetric adjacency (original ids) of the whole graph.
        assign: ``[N]`` part of every node; not modified.
        parts: P.
        weights: ``[N, ncon]`` balance weights (nodes, degree, training flag, ...).
        tolerances: ``[ncon]`` allowed max part weight / mean part weight; a part already above
            its cap may not grow.
        widths, net: the model whose per-rank layer times bound the moves (:func:`gnndist.cost.epoch_time`).
        epoch_time: modelled epoch seconds of a list of loads; a pass that raises it is undone.
        passes: maximum number of passes (each ``O(N P + boundary entries)``).
        theta: parts whose send or receive volume is at least ``theta * M`` are critical.
        prune: then drop peers of the slowest ranks (:func:`prune_peers`).
        sparse: hold the neighbour-part counts sparse (True), dense (False) or by size (None:
            :func:`gnndist.partition.counts.part_counts`); the same moves either way.
        threads: chunks of the volume deltas weighed at once; the same moves at any count.

    Returns:
        the refined assignment ``[N]`` and statistics (volume passes and the nodes they moved, volumes and
        modelled times before/after, ``peers``: the peer pruning's).
    """
    t0 = time.perf_counter()
    assign = assign.copy()
    n = csr.num_nodes
    degree = csr.degree()
    weights = weights.reshape(n, -1).astype(np.int64)
    cap = np.maximum(np.asarray(tolerances, dtype=float) * weights.sum(0) / parts,  # [ncon]
                     np.zeros(weights.shape[1]))
    wpart = np.stack([np.bincount(assign, weights=w, minlength=parts) for w in weights.T], axis=1)  # [P, ncon]
    cap = np.maximum(cap[None, :], wpart)  # [P, ncon]: a part already above the tolerance may not grow
    unit = unit_costs(widths, net)  # [layers, 5]

    cnt = part_counts(csr, assign, parts, sparse)
    loads = loads_from_counts(cnt, assign, degree)
    send0 = np.array([ld.expand_send for ld in loads])
    recv0 = np.array([ld.expand_recv for ld in loads])
    stats = {"passes": 0, "moved": 0, "counts": type(cnt).__name__, "max_volume_before": int(max(send0.max(), recv0.max())),
             "comm_volume_before": int(send0.sum()), "modelled_epoch_s_before": epoch_time(loads)}
    t_now = stats["modelled_epoch_s_before"]

    for _ in range(passes):
        moves = _propose(csr, cnt, assign, degree, weights, wpart, cap, loads, unit, parts, theta, threads)
        if moves is None:
            break
        nodes, targets = moves
        done = False
        while len(nodes):
            sources = assign[nodes]
            _apply(csr, cnt, assign, nodes, sources, targets)
            new = loads_from_counts(cnt, assign, degree)
            m_old = max(max(ld.expand_send, ld.expand_recv) for ld in loads)
            m_new = max(max(ld.expand_send, ld.expand_recv) for ld in new)
            v_old, v_new = sum(ld.expand_send for ld in loads), sum(ld.expand_send for ld in new)
            t_new = epoch_time(new)
            order = _compare(_key(_load_times(new, unit)), _key(_load_times(loads, unit)))
            if m_new <= m_old and t_new <= t_now * (1 + 1e-12) and (
                    order < 0 or (order == 0 and (m_new, v_new) < (m_old, v_old))):
                for j in range(weights.shape[1]):
                    wpart[:, j] += np.bincount(targets, weights=weights[nodes, j], minlength=parts).astype(np.int64)
                    wpart[:, j] -= np.bincount(sources, weights=weights[nodes, j], minlength=parts).astype(np.int64)
                loads, t_now, done = new, t_new, True
                stats["moved"] += len(nodes)
                break
            _apply(csr, cnt, assign, nodes, targets, sources)  # undo, retry with the better half
            half = len(nodes) // 2
            nodes, targets = nodes[:half], targets[:half]
        if not done:
            break
        stats["passes"] += 1

    if prune:
        book = _Book(csr, assign, cnt, weights)
        stats["peers"] = prune_peers(book, unit, cap)
        if stats["peers"]["groups"]:
            loads = loads_from_counts(cnt, assign, degree)
            t_now = epoch_time(loads)
    send = np.array([ld.expand_send for ld in loads])
    recv = np.array([ld.expand_recv for ld in loads])
    stats.update(max_volume_after=int(max(send.max(), recv.max())), comm_volume_after=int(send.sum()),
                 modelled_epoch_s_after=t_now, seconds=round(time.perf_counter() - t0, 3))
    return assign, stats


def _apply(csr: GlobalCSR, cnt, assign: np.ndarray, nodes, sources, targets) -> None:
    """Move ``nodes`` from ``sources`` to ``targets``, updating the counts of their neighbours in place."""
    pos, owner = _entries_of(csr.rowptr, nodes)
    cnt.move_neighbours(csr.col[pos].astype(np.int64), sources[owner], targets[owner])
    assign[nodes] = targets


def _cumulative(src: np.ndarray, dst: np.ndarray, w: np.ndarray, parts: int) -> np.ndarray:
    """Change of every part's weight after each prefix of the moves ``src[i] -> dst[i]`` of weight ``w[i]``.

    Shapes:
        src, dst, w ``[K]`` -> ``[K, parts]``
    """
    step = np.zeros((len(src), parts), dtype=np.int64)
    step[np.arange(len(src)), dst] += w
    step[np.arange(len(src)), src] -= w
    return np.cumsum(step, axis=0)


@dataclass
class _Pass:
    """What one refinement pass proposes moves from: the partition's state and the caps a move must keep."""

    csr: GlobalCSR
    cnt: object  # neighbour counts per (node, part), dense or sparse (gnndist.partition.counts)
    assign: np.ndarray  # [N]
    degree: np.ndarray  # [N]
    weights: np.ndarray  # [N, ncon] balance weights
    wpart: np.ndarray  # [P, ncon] every part's weight
    cap: np.ndarray  # [P, ncon] the most a part may weigh
    loads: list  # [P] RankLoad
    unit: np.ndarray  # [layers, 5] unit costs
    parts: int
    theta: float  # a part is critical within theta of the largest volume
    threads: int = 1  # the volume deltas' chunks weighed at once

    def __post_init__(self):
        self.send = np.array([ld.expand_send for ld in self.loads])  # [P]
        self.recv = np.array([ld.expand_recv for ld in self.loads])
        self.m0 = max(self.send.max(), self.recv.max())
        self.crit_s, self.crit_r = self.send >= self.theta * self.m0, self.recv >= self.theta * self.m0


def _propose(csr, cnt, assign, degree, weights, wpart, cap, loads, unit, parts, theta, threads=1):
    """Candidate moves of one pass, best first, as (nodes, targets); None when there is none.

    Four steps: the candidate moves (:func:`_candidates`), what each does to every part's send and
    receive volume (:func:`_volume_deltas`), the moves that improve the modelled time or the volume,
    ranked and made independent (:func:`_ranked`), and the longest prefix that keeps every cap
    (:func:`_feasible_prefix`).
    """
    ps = _Pass(csr, cnt, assign, degree, weights, wpart, cap, loads, unit, parts, theta, threads)
    if ps.m0 == 0:
        return None
    found = _candidates(ps)
    if found is None:
        return None
    cand, b, ext, own_cnt, nparts_v = found
    d_send, d_recv = _volume_deltas(ps, cand, b, ext, own_cnt, nparts_v)
    idx = _ranked(ps, cand, b, d_send, d_recv)
    if idx is None:
        return None
    stop = _feasible_prefix(ps, cand, b, idx, d_send, d_recv)
    if stop == 0:
        return None
    return cand[idx[:stop]], b[idx[:stop]]


def _candidates(ps: _Pass):
    """The moves to weigh: each boundary node to the other part it has most neighbours in, and a move into
    every critical part from each of its outside neighbours (capped to :data:`DENSE_CELLS` cells of ``[K, P]``).

    Returns ``(cand, b, ext, own_cnt, nparts_v)``: the nodes ``[K]``, their target parts ``[K]``, and per node
    ``[N]`` the parts its row is sent to, its neighbours in its own part, the parts it has neighbours in; or None.
    """
    cnt, assign, parts = ps.cnt, ps.assign, ps.parts
    n = len(assign)
    own_cnt = cnt.get(np.arange(n), assign)
    nparts_v = cnt.nonzero_per_row()
    ext = nparts_v - (own_cnt > 0)  # [N] parts v's row is sent to
    cand = np.flatnonzero(ext > 0)
    if len(cand) == 0:
        return None
    crit_s, crit_r = ps.crit_s, ps.crit_r
    # cap the candidates (dense [K, P] tables): prefer nodes of critical parts, then more outside neighbours
    k_max = max(DENSE_CELLS // parts, 1)
    if len(cand) > k_max:
        a = assign[cand]
        pre = (crit_s[a] | crit_r[a]).astype(np.int64) * (1 << 40) + (ps.degree[cand] - own_cnt[cand])
        cand = np.sort(cand[np.argsort(-pre, kind="stable")[:k_max]])
    outside = cnt.rows(cand)  # [K, P]
    outside[np.arange(len(cand)), assign[cand]] = -1
    b = outside.argmax(axis=1)  # [K] the other part with most neighbours (lowest id on ties)
    del outside
    # and a move into every critical part from each of its outside neighbours
    crit_parts = np.flatnonzero(crit_s | crit_r)
    v_extra, p_extra = cnt.pairs_in(crit_parts, assign)  # nodes outside a critical part with a neighbour in it
    if len(v_extra) + len(cand) > k_max:  # nodes of critical parts first
        v_extra, p_extra = v_extra[: max(k_max - len(cand), 0)], p_extra[: max(k_max - len(cand), 0)]
    p_extra = crit_parts[p_extra]
    dup = b[np.searchsorted(cand, v_extra).clip(0, len(cand) - 1)] == p_extra
    dup &= cand[np.searchsorted(cand, v_extra).clip(0, len(cand) - 1)] == v_extra
    return np.concatenate([cand, v_extra[~dup]]), np.concatenate([b, p_extra[~dup]]), ext, own_cnt, nparts_v


def _volume_deltas(ps: _Pass, cand, b, ext, own_cnt, nparts_v) -> tuple[np.ndarray, np.ndarray]:
    """The change of every part's sent and received rows if ``cand[i]`` alone moved to ``b[i]``.

    Shapes:
        cand, b ``[K]`` -> d_send, d_recv ``[K, P]`` int32 (counts of rows, exact)
    """
    csr, cnt, assign, parts = ps.csr, ps.cnt, ps.assign, ps.parts
    k = len(cand)
    a = assign[cand]
    # [K, P] tables in int32: at K P = 2^25 cells each int64 one was 256 MiB
    d_send = np.zeros(k * parts, dtype=np.int32)  # [K * P] flat, move-major
    d_recv = np.zeros(k * parts, dtype=np.int32)
    base = np.arange(k, dtype=np.int64) * parts
    np.add.at(d_send, base + a, -ext[cand].astype(np.int32))
    np.add.at(d_send, base + b, (nparts_v[cand] - 1).astype(np.int32))
    np.add.at(d_recv, base + b, np.int32(-1))
    np.add.at(d_recv, base + a, (own_cnt[cand] > 0).astype(np.int32))
    lens = csr.rowptr[cand + 1] - csr.rowptr[cand]
    ends = np.cumsum(lens)
    spans, i0 = [], 0
    while i0 < k:  # neighbour terms, in chunks of entries
        i1 = int(np.searchsorted(ends, (ends[i0 - 1] if i0 else 0) + CHUNK, side="right"))
        i1 = min(max(i1, i0 + 1), k, i0 + max(CHUNK // parts, 1))  # and at most CHUNK cells of [K, P]
        spans.append((i0, i1))
        i0 = i1
    part = assign.astype(np.int16 if parts < 2**15 else np.int64)  # [N] a narrow copy: the gathers below are random
    a, b = a.astype(part.dtype), b.astype(part.dtype)

    def neighbour_terms(span: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        i0, i1 = span
        pos, owner = _entries_of(csr.rowptr, cand[i0:i1])  # owner: local to the chunk
        u = csr.col[pos]
        del pos
        c, ak, bk = part[u], a[i0:i1][owner], b[i0:i1][owner]
        lose = (c != ak) & (cnt.get(u, ak) == 1)  # a no longer needs u
        gain = (c != bk) & (cnt.get(u, bk) == 0)  # b now needs u
        size = (i1 - i0) * parts
        key = owner * parts
        g, lo = key[gain], key[lose]
        ds = np.bincount(g + c[gain], minlength=size) - np.bincount(lo + c[lose], minlength=size)
        dr = np.bincount(g + bk[gain], minlength=size) - np.bincount(lo + ak[lose], minlength=size)
        return ds.astype(np.int32), dr.astype(np.int32)

    for (i0, i1), (ds, dr) in zip(spans, in_order(neighbour_terms, spans, ps.threads)):
        d_send[i0 * parts : i1 * parts] += ds
        d_recv[i0 * parts : i1 * parts] += dr
    return d_send.reshape(k, parts), d_recv.reshape(k, parts)


def _ranked(ps: _Pass, cand, b, d_send, d_recv) -> np.ndarray | None:
    """Indices into ``cand`` of the moves that help, best first: one per node, no two at adjacent nodes; or None.

    A move helps when it lowers the modelled time of the time-critical ranks (per layer, within
    ``1 - theta`` of the spread below the slowest: their halo, row and nonzero terms; peers are left to
    the exact check and the pruning), else at equal time the volume of the volume-critical parts, else
    the total volume; and keeps the largest volume and the target's balance caps.
    """
    send, recv, m0, unit, degree = ps.send, ps.recv, ps.m0, ps.unit, ps.degree
    a = ps.assign[cand]
    times = _load_times(ps.loads, unit)  # [layers, P]
    hi, lo = times.max(1, keepdims=True), times.min(1, keepdims=True)
    crit_t = times >= hi - (1 - ps.theta) * (hi - lo)
    w_halo, w_row, w_nnz = ((unit[:, j : j + 1] * crit_t).sum(0) for j in (2, 0, 1))  # [P] each
    send32, recv32 = send.astype(np.int32), recv.astype(np.int32)  # so that [K, P] sums stay int32
    halo = np.maximum(send32 + d_send, recv32 + d_recv)
    halo -= np.maximum(send32, recv32)  # [K, P]
    dt = halo @ w_halo + (w_row[b] - w_row[a]) + degree[cand] * (w_nnz[b] - w_nnz[a])  # [K]
    del halo
    eps = 1e-12 * float(hi.sum())
    dt[np.abs(dt) <= eps] = 0.0
    crit = (d_send[:, ps.crit_s].sum(1) + d_recv[:, ps.crit_r].sum(1))  # [K]
    vol = d_send.sum(1)
    ok = (dt < 0) | ((dt == 0) & ((crit < 0) | ((crit == 0) & (vol < 0))))
    ok &= ((send32 + d_send) <= m0).all(1) & ((recv32 + d_recv) <= m0).all(1)
    ok &= (ps.wpart[b] + ps.weights[cand] <= ps.cap[b]).all(1)
    idx = np.flatnonzero(ok)
    if len(idx) == 0:
        return None
    idx = idx[np.lexsort((vol[idx], crit[idx], dt[idx]))]  # best first
    _, first = np.unique(cand[idx], return_index=True)  # one move per node: its best
    idx = idx[np.sort(first)]
    # no two moved nodes adjacent: keep a move only if no better-ranked move sits at a neighbour
    rank = np.full(len(ps.assign), np.iinfo(np.int64).max, dtype=np.int64)
    rank[cand[idx]] = np.arange(len(idx))
    nodes = cand[idx]
    pos, _ = _entries_of(ps.csr.rowptr, nodes)
    nb_best = np.full(len(idx), np.iinfo(np.int64).max, dtype=np.int64)
    lens = ps.csr.rowptr[nodes + 1] - ps.csr.rowptr[nodes]
    has = lens > 0  # each node's entries are one run of pos: a segmented minimum (minimum.at is ~10x slower)
    if has.any():
        nb_best[has] = np.minimum.reduceat(rank[ps.csr.col[pos]], (np.cumsum(lens) - lens)[has])
    return idx[nb_best > np.arange(len(idx))]


def _feasible_prefix(ps: _Pass, cand, b, idx, d_send, d_recv) -> int:
    """How many of the ranked moves ``idx`` can be made together: the longest prefix that keeps the caps
    (balance, the largest volume, and every rank's modelled layer time)."""
    ds, dr = np.cumsum(d_send[idx], 0), np.cumsum(d_recv[idx], 0)  # [K', P]
    s, r = ps.send + ds, ps.recv + dr
    good = (s <= ps.m0).all(1) & (r <= ps.m0).all(1)
    src, dst = ps.assign[cand[idx]], b[idx]
    for j in range(ps.weights.shape[1]):
        good &= (ps.wpart[:, j] + _cumulative(src, dst, ps.weights[cand[idx], j], ps.parts) <= ps.cap[:, j]).all(1)
    dw_rows = _cumulative(src, dst, np.ones(len(idx), dtype=np.int64), ps.parts)
    dw_nnz = _cumulative(src, dst, ps.degree[cand[idx]], ps.parts)
    rows0 = np.array([ld.rows for ld in ps.loads])
    nnz0 = np.array([ld.nnz for ld in ps.loads])
    msgs = np.array([ld.messages for ld in ps.loads])
    now = _times(ps.unit, rows0, nnz0, np.maximum(ps.send, ps.recv), msgs)  # [layers, P]
    later = _times(ps.unit, rows0 + dw_rows, nnz0 + dw_nnz, np.maximum(s, r), msgs)  # [layers, K', P]
    good &= (later <= now.max(axis=1)[:, None, None] * (1 + 1e-12)).all(axis=(0, 2))
    return len(idx) if good.all() else int(np.argmin(good))


class _Book:
    """Exact incremental bookkeeping of a partition for moves of single nodes: the neighbour counts
    ``cnt`` (:mod:`~gnndist.partition.counts`, dense or sparse), the rows every part sends every other ``pair [P, P]``, owned rows, nonzeros and
    balance weights per part. A move and its reverse restore every count exactly."""

    def __init__(self, csr: GlobalCSR, assign: np.ndarray, cnt, weights: np.ndarray):
        cnt = _as_counts(cnt)
        parts = cnt.parts
        self.csr, self.assign, self.cnt, self.weights = csr, assign, cnt, weights
        self.degree = csr.degree()
        self.pair = cnt.send_pairs(assign)
        self.rows = np.bincount(assign, minlength=parts).astype(np.int64)
        self.nnz = np.bincount(assign, weights=self.degree, minlength=parts).astype(np.int64)
        self.wpart = np.stack([np.bincount(assign, weights=w, minlength=parts) for w in weights.T],
                              axis=1).astype(np.int64)  # [P, ncon]

    def move(self, v: int, t: int) -> None:
        """Move node ``v`` to part ``t``."""
        a = int(self.assign[v])
        if a == t:
            return
        cnt, pair = self.cnt, self.pair
        # v's own row: part a stops sending it, part t starts, each to the parts holding v's neighbours
        nz = np.flatnonzero(cnt.row(v))
        pair[a, nz[nz != a]] -= 1
        pair[t, nz[nz != t]] += 1
        # each neighbour u (in part c): a may stop needing u, t may start
        nb = self.csr.col[self.csr.rowptr[v] : self.csr.rowptr[v + 1]]
        pn = self.assign[nb]
        lost = (cnt.get(nb, a) == 1) & (pn != a)
        gain = (cnt.get(nb, t) == 0) & (pn != t)
        np.add.at(pair[:, a], pn[lost], -1)
        np.add.at(pair[:, t], pn[gain], 1)
        cnt.add(nb, a, -1)
        cnt.add(nb, t, 1)
        self.rows[a] -= 1
        self.rows[t] += 1
        self.nnz[a] -= self.degree[v]
        self.nnz[t] += self.degree[v]
        self.wpart[a] -= self.weights[v]
        self.wpart[t] += self.weights[v]
        self.assign[v] = t

    def peers(self) -> np.ndarray:
        """``[P, P]`` bool: the parts every part exchanges rows with (the graph is symmetric)."""
        return (self.pair > 0) | (self.pair.T > 0)

    def layer_times(self, unit: np.ndarray) -> np.ndarray:
        """``[layers, P]`` modelled seconds of every rank in every layer (:func:`unit_costs`)."""
        vol = np.maximum(self.pair.sum(1), self.pair.sum(0))
        msgs = np.maximum(np.count_nonzero(self.pair, axis=1), np.count_nonzero(self.pair, axis=0))
        return _times(unit, self.rows, self.nnz, vol, msgs)

    def max_volume(self) -> int:
        return int(max(self.pair.sum(1).max(), self.pair.sum(0).max()))


def _times(unit: np.ndarray, rows, nnz, halo, msgs) -> np.ndarray:
    """Modelled seconds per layer of ranks with these owned rows, nonzeros, halo rows (max of sent and
    received) and peers (:func:`unit_costs`): ``[layers, *shape]`` for counts of any one ``shape``."""
    u = unit.reshape(unit.shape[:1] + (1,) * np.ndim(rows) + unit.shape[1:])
    return u[..., 4] + u[..., 0] * rows + u[..., 1] * nnz + u[..., 2] * halo + u[..., 3] * msgs


def _load_times(loads: list[RankLoad], unit: np.ndarray) -> np.ndarray:
    """``[layers, P]`` modelled seconds of every rank in every layer (:func:`unit_costs`), from its loads."""
    a = np.array([[ld.rows, ld.nnz, max(ld.expand_send, ld.expand_recv), ld.messages] for ld in loads], dtype=float)
    return _times(unit, *a.T)


def _key(times: np.ndarray) -> tuple[float, np.ndarray]:
    """What the peer pruning lowers: the modelled layer time summed over layers (the epoch, less its constant
    all-reduce), then the ranks' own summed times from the slowest down (leximax)."""
    return float(times.max(axis=1).sum()), np.sort(times.sum(axis=0))[::-1]


def _compare(new: tuple[float, np.ndarray], old: tuple[float, np.ndarray]) -> int:
    """-1 when ``new`` is better (:func:`_key`, to a relative 1e-12), 0 when equal, 1 when worse."""
    eps = 1e-12 * max(old[0], 1e-300)
    if abs(new[0] - old[0]) > eps:
        return -1 if new[0] < old[0] else 1
    diff = new[1] - old[1]
    first = np.flatnonzero(np.abs(diff) > eps)
    return 0 if not len(first) else (-1 if diff[first[0]] < 0 else 1)


def _better(new: tuple[float, np.ndarray], old: tuple[float, np.ndarray]) -> bool:
    return _compare(new, old) < 0


def prune_peers(book: _Book, unit: np.ndarray, cap: np.ndarray, max_group: int = 32,
                max_tries: int = 1024) -> dict:
    """Drop peers of the slowest ranks by moving the few nodes that tie two parts together.

    Per exchange a rank pays ``alpha`` per peer, and at large P with narrow layers the peers, not
    the rows, set a rank's time (``docs/partitioning.md``). Two parts ``a`` and ``c`` are peers
    while one edge joins them; when only a few nodes of ``a`` (or of ``c``) have neighbours on the
    other side, moving those nodes to a third part that already exchanges with the parts of their
    neighbours removes the pair and adds none. Ranks are visited slowest first, their weakest
    pairs first (fewest such nodes, at most ``max_group``); a group of moves is kept when it lowers
    the modelled epoch time, or keeps it and lowers the ranks' times leximax (slowest first), keeps
    every balance weight under ``cap`` and does not raise the maximum per-rank volume; otherwise
    it is undone exactly.

    Returns statistics: ``groups`` kept, nodes ``moved``, ``tries``, max peers before and after.
    """
    parts = book.pair.shape[0]
    times = book.layer_times(unit)
    key = _key(times)
    stats = {"groups": 0, "moved": 0, "tries": 0,
             "max_peers_before": int(book.peers().sum(1).max())}
    m_vol = book.max_volume()
    v_cap = int(VOLUME_GROWTH * book.pair.sum())
    done: set = set()  # (part, peer, side) tries that failed since their parts last changed
    fresh = True  # done was just emptied: a sweep without a kept group then ends the pruning
    while stats["tries"] < max_tries:
        progress = False
        order = np.argsort(-times.sum(axis=0), kind="stable")
        for a in order[: max(4, parts // 4)]:
            peers = book.peers()
            cands = []
            for c in np.flatnonzero(peers[a]):
                for side, other in ((a, c), (c, a)):
                    size = int(book.pair[side, other])
                    if 0 < size <= max_group and (a, c, side) not in done:
                        cands.append((size, int(c), int(side), int(other)))
            for size, c, side, other in sorted(cands):
                if stats["tries"] >= max_tries:
                    break
                stats["tries"] += 1
                nodes = book.cnt.in_part(other)
                nodes = nodes[book.assign[nodes] == side]
                moves = []
                for v in nodes:
                    t = _target(book, int(v), side, other)
                    if t is None:
                        break
                    book.move(int(v), t)
                    moves.append((int(v), side))
                    if (book.wpart[t] > cap[t]).any():  # a target only gains weight in a group: it fails
                        break
                new_times = book.layer_times(unit)
                ok = (len(moves) == len(nodes) and (book.wpart <= cap).all() and book.max_volume() <= m_vol
                      and book.pair.sum() <= v_cap and _better(_key(new_times), key))
                if ok:
                    touched = set(np.flatnonzero((new_times != times).any(axis=0)).tolist())
                    done = {d for d in done if not touched.intersection(d)}  # tries whose parts changed: again
                    times, key = new_times, _key(new_times)
                    stats["groups"] += 1
                    stats["moved"] += len(moves)
                    progress = True
                    break
                for v, s in reversed(moves):
                    book.move(v, s)
                done.add((int(a), c, side))
            if progress:
                break
        if not progress and fresh:
            break
        if not progress:  # tries remembered as failed may pass now that other parts changed: all once more
            done.clear()
        fresh = not progress
    stats["max_peers_after"] = int(book.peers().sum(1).max())
    return stats


def _target(book: _Book, v: int, side: int, other: int) -> int | None:
    """Where node ``v`` of part ``side`` goes so that it no longer ties ``side`` to ``other``: a third part
    (or ``other`` itself when ``v`` has no neighbour left in ``side``), the one adding fewest new peers,
    then holding most of ``v``'s neighbours; None when there is no such part."""
    parts = book.pair.shape[0]
    cv = book.cnt.row(v)
    allowed = np.ones(parts, dtype=bool)
    allowed[side] = False
    if cv[side] > 0:
        allowed[other] = False
    if not allowed.any():
        return None
    peers = book.peers()
    needs = cv > 0  # parts v exchanges with, wherever it goes
    new_peers = (needs[None, :] & ~peers & ~np.eye(parts, dtype=bool)).sum(1)  # [P] if v moved to each part
    score = new_peers.astype(np.int64) * (1 << 40) - cv  # fewest new peers, then most neighbours
    score[~allowed] = np.iinfo(np.int64).max
    t = int(np.argmin(score))
    return t if allowed[t] and new_peers[t] == 0 else None
