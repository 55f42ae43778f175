"""The moves one refinement pass proposes: steps 2 to 4 of :mod:`gnndist.partition.refine`.

Every boundary node gets a candidate move (and nodes next to a critical part a move into it); each move's exact
effect on every part's send and receive volume if it moved alone is counted; the moves that lower the modelled
time of the time-critical ranks (else the critical volume, else the total) are ranked best first, one per node
and no two at adjacent nodes; and the longest prefix that keeps every cap is proposed (:func:`propose`). The
refinement applies them, recounts exactly and keeps or undoes the pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gnndist.partition.book import ENTRY_CHUNK, GlobalCSR, in_order
from gnndist.partition.rank_times import load_times, times_of

DENSE_CELLS = 1 << 24  # candidates per pass are capped so that [candidates, P] tables stay this small


def entries_of(rowptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the adjacency entries of ``nodes`` and, for each, the index of its node in ``nodes``."""
    lens = rowptr[nodes + 1] - rowptr[nodes]
    owner = np.repeat(np.arange(len(nodes), dtype=np.int64), lens)
    start = np.repeat(rowptr[nodes] - np.cumsum(lens) + lens, lens)
    return start + np.arange(len(owner), dtype=np.int64), owner


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
class Pass:
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


def propose(ps: Pass):
    """Candidate moves of one pass, best first, as (nodes, targets); None when there is none.

    Four steps: the candidate moves (:func:`_candidates`), what each does to every part's send and
    receive volume (:func:`_volume_deltas`), the moves that improve the modelled time or the volume,
    ranked and made independent (:func:`_ranked`), and the longest prefix that keeps every cap
    (:func:`_feasible_prefix`).
    """
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


def _candidates(ps: Pass):
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


def _volume_deltas(ps: Pass, cand, b, ext, own_cnt, nparts_v) -> tuple[np.ndarray, np.ndarray]:
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
    spans = _node_spans(csr.rowptr, cand, ENTRY_CHUNK, max(ENTRY_CHUNK // parts, 1))  # neighbour terms by chunks
    part = assign.astype(np.int16 if parts < 2**15 else np.int64)  # [N] a narrow copy: the gathers below are random
    a, b = a.astype(part.dtype), b.astype(part.dtype)

    def neighbour_terms(span: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        i0, i1 = span
        pos, owner = entries_of(csr.rowptr, cand[i0:i1])  # owner: local to the chunk
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


def _ranked(ps: Pass, cand, b, d_send, d_recv) -> np.ndarray | None:
    """Indices into ``cand`` of the moves that help, best first: one per node, no two at adjacent nodes; or None.

    A move helps when it lowers the modelled time of the time-critical ranks (per layer, within
    ``1 - theta`` of the spread below the slowest: their halo, row and nonzero terms; peers are left to
    the exact check and the pruning), else at equal time the volume of the volume-critical parts, else
    the total volume; and keeps the largest volume and the target's balance caps.
    """
    send, recv, m0, unit, degree = ps.send, ps.recv, ps.m0, ps.unit, ps.degree
    a = ps.assign[cand]
    times = load_times(ps.loads, unit)  # [layers, P]
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
    nb_best = np.full(len(idx), np.iinfo(np.int64).max, dtype=np.int64)
    for i0, i1 in _node_spans(ps.csr.rowptr, nodes, ENTRY_CHUNK):  # the nodes' entries a chunk at a time
        pos, _ = entries_of(ps.csr.rowptr, nodes[i0:i1])
        lens = ps.csr.rowptr[nodes[i0:i1] + 1] - ps.csr.rowptr[nodes[i0:i1]]
        has = lens > 0  # each node's entries are one run of pos: a segmented minimum (minimum.at is ~10x slower)
        if has.any():
            nb_best[i0:i1][has] = np.minimum.reduceat(rank[ps.csr.col[pos]], (np.cumsum(lens) - lens)[has])
    return idx[nb_best > np.arange(len(idx))]


def _node_spans(rowptr: np.ndarray, nodes: np.ndarray, entries: int, most: int | None = None) -> list[tuple[int, int]]:
    """``(i0, i1)`` ranges of ``nodes`` whose rows hold at most ``entries`` adjacency entries together (at least
    one node each) and at most ``most`` nodes, covering them in order."""
    ends = np.cumsum(rowptr[nodes + 1] - rowptr[nodes])
    k, most = len(nodes), most or len(nodes)
    spans, i0 = [], 0
    while i0 < k:
        i1 = int(np.searchsorted(ends, (ends[i0 - 1] if i0 else 0) + entries, side="right"))
        i1 = min(max(i1, i0 + 1), k, i0 + most)
        spans.append((i0, i1))
        i0 = i1
    return spans


def _feasible_prefix(ps: Pass, cand, b, idx, d_send, d_recv) -> int:
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
    now = times_of(ps.unit, rows0, nnz0, np.maximum(ps.send, ps.recv), msgs)  # [layers, P]
    later = times_of(ps.unit, rows0 + dw_rows, nnz0 + dw_nnz, np.maximum(s, r), msgs)  # [layers, K', P]
    good &= (later <= now.max(axis=1)[:, None, None] * (1 + 1e-12)).all(axis=(0, 2))
    return len(idx) if good.all() else int(np.argmin(good))
