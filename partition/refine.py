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
   the ranks' modelled times fell (:func:`~gnndist.partition.rank_times.time_key`: the epoch,
   then leximax: the sorted per-rank times, slowest first), or stayed and ``(M, total volume)``
   fell. One strict order: no cycles.

Steps 2 to 4, the moves a pass proposes, are :mod:`gnndist.partition.moves`; this module counts, applies and
keeps or undoes them.

Then the *peer pruning* (:func:`~gnndist.partition.peers.prune_peers`): a rank pays a latency
per peer, and at large P with narrow layers the peers, not the rows, set its time. Two parts stay
peers while one edge joins them; where few nodes tie them, those nodes move (as a group, one node
at a time with exact bookkeeping, :class:`~gnndist.partition.peers.Ledger`) to a third part that
exchanges with their neighbours' parts already. A group is kept when the modelled time falls (or
holds while the ranks' times fall leximax, slowest first), the tolerances hold, the maximum volume
does not grow and the total volume stays within :data:`~gnndist.partition.peers.VOLUME_GROWTH` of
where the pruning began.

So, by construction, refinement never breaks a balance tolerance that held before, never
raises the maximum per-rank volume and never raises the modelled epoch time.

The volume passes stop at the first of (the statistics' ``stop``): ``"no moves"`` (a pass found none to keep),
``"gain"`` (a pass lowered the modelled epoch by less than :data:`MIN_PASS_GAIN` of it: gains that small are
below what the cost model resolves), ``"passes"`` (``passes`` ran) or ``"time"`` (the passes took
:data:`TIME_SLACK` times their estimated seconds, and :data:`TIME_FLOOR`: a backstop on a machine far slower
than the estimate's). Only ``"time"`` depends on the machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from gnndist.partition.book import GlobalCSR
from gnndist.partition.counts import DenseCounts, as_counts, part_counts
from gnndist.partition.moves import Pass, entries_of, propose
from gnndist.partition.peers import Ledger, prune_peers
from gnndist.partition.plan import refine_seconds
from gnndist.partition.rank_times import compare, load_times, time_key, unit_costs

from gnndist.cost import MODEL_ERROR, Network, RankLoad, epoch_time

MAX_PASSES = 16  # the most volume passes the pipeline runs (fewer above 2^23 entries: choose.candidates)
# A volume pass that lowers the modelled epoch by less than this fraction of it is the last: the cost model's median
# error (gnndist.cost.MODEL_ERROR, 9%) over MAX_PASSES, 0.56%, so that even every pass the pipeline may run, each
# gaining less, would not add up to a difference the model resolves. Measured (NOTES-thr49.md): on Cora and a 3000-node
# synthetic graph at P = 4 and 8, from METIS and random starts, on ib and ethernet, no pass gained over 0.7% and no
# refinement over 0.9% in all; on a 20M-entry graph at P = 4 six passes gained 0.35% in all and took 4x the
# partitioner's seconds.
MIN_PASS_GAIN = MODEL_ERROR / MAX_PASSES
# The passes stop starting once they have taken this many times their estimated seconds
# (gnndist.partition.plan.refine_seconds), and at least TIME_FLOOR seconds (fixed costs rule small graphs): a
# generous backstop, so that on any machine within 4x of the estimate's the gain and the pass count, which do not
# depend on the machine, decide.
TIME_SLACK = 4.0
TIME_FLOOR = 10.0


def neighbour_part_counts(csr: GlobalCSR, assign: np.ndarray, parts: int) -> np.ndarray:
    """Neighbours of every node in every part, as a dense table (:class:`~gnndist.partition.counts.DenseCounts`).

    Shapes:
        -> ``[N, parts]`` int32
    """
    return DenseCounts(csr, assign, parts).table


def loads_from_counts(counts, assign: np.ndarray, degree: np.ndarray) -> list[RankLoad]:
    """The 1D halo exchange's :class:`~gnndist.cost.RankLoad` of every part, from neighbour-part counts
    (a :mod:`~gnndist.partition.counts` object, or a dense ``[N, P]`` table)."""
    counts = as_counts(counts)
    parts = counts.parts
    pair = counts.send_pairs(assign)  # [src, dst] rows
    messages = np.maximum(np.count_nonzero(pair, axis=0), np.count_nonzero(pair, axis=1))
    nnz = np.bincount(assign, weights=degree, minlength=parts).astype(np.int64)
    rows = np.bincount(assign, minlength=parts)
    return [RankLoad(expand_send=int(pair[k].sum()), expand_recv=int(pair[:, k].sum()), messages=int(messages[k]),
                     nnz=int(nnz[k]), rows=int(rows[k])) for k in range(parts)]


@dataclass(frozen=True)
class RefineSettings:
    """How the refinement weighs its moves (the model whose per-rank layer times bound them) and how far it goes.

    Args:
        widths, net: the model whose modelled epoch (:func:`gnndist.cost.epoch_time`) and per-rank layer
            times bound the moves; a pass that raises the epoch is undone.
        passes: maximum number of volume passes (each ``O(N P + boundary entries)``, default 8).
        min_gain: the last pass is one that lowers the modelled epoch by less than this fraction of it (default
            :data:`MIN_PASS_GAIN`; 0: every pass that keeps moves runs).
        seconds: no pass starts once the passes have taken this long (default None: :data:`TIME_SLACK` times
            their estimated seconds, :func:`~gnndist.partition.plan.refine_seconds`, at least :data:`TIME_FLOOR`).
        theta: parts whose send or receive volume is at least ``theta * M`` are critical (default 0.8).
        prune: then drop peers of the slowest ranks (:func:`~gnndist.partition.peers.prune_peers`, default True).
        sparse: hold the neighbour-part counts sparse (True), dense (False) or by size (None, default:
            :func:`gnndist.partition.counts.part_counts`); the same moves either way.
        threads: chunks of the neighbour-part counts and the volume deltas weighed at once (default 1); the same
            moves at any count.
    """

    widths: tuple[int, ...]
    net: Network
    passes: int = 8
    min_gain: float = MIN_PASS_GAIN
    seconds: float | None = None
    theta: float = 0.8
    prune: bool = True
    sparse: bool | None = None
    threads: int = 1

    def epoch(self, loads: list[RankLoad]) -> float:
        """The modelled epoch seconds of ``loads`` (:func:`gnndist.cost.epoch_time`)."""
        return epoch_time(loads, self.widths, self.net)

    def budget(self, nnz: int, n: int, parts: int) -> float:
        """Seconds of passes after which no pass starts: ``seconds``, else :data:`TIME_SLACK` times the passes'
        estimate, at least :data:`TIME_FLOOR`."""
        if self.seconds is not None:
            return self.seconds
        return max(TIME_SLACK * refine_seconds(nnz, n, parts, self.passes, tries=0), TIME_FLOOR)


def refine(csr: GlobalCSR, assign: np.ndarray, parts: int, weights: np.ndarray, tolerances: np.ndarray,
           settings: RefineSettings) -> tuple[np.ndarray, dict]:
    """Lower the maximum per-rank send/receive volume of ``assign`` (see the module docstring).

    Args:
        csr: symmetric adjacency (original ids) of the whole graph.
        assign: ``[N]`` part of every node; not modified.
        parts: P.
        weights: ``[N, ncon]`` balance weights (nodes, degree, training flag, ...).
        tolerances: ``[ncon]`` allowed max part weight / mean part weight; a part already above
            its cap may not grow.
        settings: the cost model and the passes, :class:`RefineSettings`.

    Returns:
        the refined assignment ``[N]`` and statistics (volume passes and the nodes they moved, ``stop``: why the
        passes stopped (see the module docstring), ``pass_gains``: each pass's fall of the modelled epoch over
        the epoch before it, volumes and modelled times before/after, ``peers``: the peer pruning's).
    """
    t0 = time.perf_counter()
    assign = assign.copy()
    degree = csr.degree()
    weights = weights.reshape(csr.num_nodes, -1).astype(np.int64)
    wpart = np.stack([np.bincount(assign, weights=w, minlength=parts) for w in weights.T], axis=1)  # [P, ncon]
    cap = np.maximum(np.asarray(tolerances, dtype=float) * weights.sum(0) / parts,  # [ncon]
                     np.zeros(weights.shape[1]))
    cap = np.maximum(cap[None, :], wpart)  # [P, ncon]: a part already above the tolerance may not grow
    unit = unit_costs(settings.widths, settings.net)  # [layers, 5]
    cnt = part_counts(csr, assign, parts, settings.sparse, settings.threads)
    loads = loads_from_counts(cnt, assign, degree)
    stats = {"passes": 0, "moved": 0, "stop": "passes", "pass_gains": [], "counts": type(cnt).__name__,
             **_volumes(loads, "before"), "modelled_epoch_s_before": settings.epoch(loads)}
    t_now = stats["modelled_epoch_s_before"]
    budget, t_passes = settings.budget(csr.nnz, csr.num_nodes, parts), time.perf_counter()
    for _ in range(settings.passes):
        if time.perf_counter() - t_passes > budget:
            stats["stop"] = "time"
            break
        ps = Pass(csr, cnt, assign, degree, weights, wpart, cap, loads, unit, parts, settings.theta, settings.threads)
        kept = _volume_pass(ps, t_now, settings.epoch)
        if kept is None:
            stats["stop"] = "no moves"
            break
        loads, t_new, moved = kept
        gain = (t_now - t_new) / t_now if t_now > 0 else 0.0
        t_now = t_new
        stats["moved"] += moved
        stats["passes"] += 1
        stats["pass_gains"].append(gain)
        if gain < settings.min_gain:
            stats["stop"] = "gain"
            break
    if settings.prune:
        stats["peers"] = prune_peers(Ledger(csr, assign, cnt, weights), unit, cap)
        if stats["peers"]["groups"]:
            loads = loads_from_counts(cnt, assign, degree)
            t_now = settings.epoch(loads)
    stats.update(**_volumes(loads, "after"), modelled_epoch_s_after=t_now, seconds=round(time.perf_counter() - t0, 3))
    return assign, stats


def _volumes(loads: list[RankLoad], when: str) -> dict:
    """The statistics' ``max_volume_<when>`` (the largest rows sent or received) and ``comm_volume_<when>``."""
    send = np.array([ld.expand_send for ld in loads])
    recv = np.array([ld.expand_recv for ld in loads])
    return {f"max_volume_{when}": int(max(send.max(), recv.max())), f"comm_volume_{when}": int(send.sum())}


def _volume_pass(ps: Pass, t_now: float, epoch: Callable[[list[RankLoad]], float]) -> tuple[list, float, int] | None:
    """One volume pass: the proposed moves (:func:`~gnndist.partition.moves.propose`) applied, and undone and
    retried with the better half until :func:`_accepted`. Returns the loads, the modelled epoch and the nodes moved;
    None when none was."""
    moves = propose(ps)
    if moves is None:
        return None
    nodes, targets = moves
    csr, cnt, assign = ps.csr, ps.cnt, ps.assign
    while len(nodes):
        sources = assign[nodes]
        _apply(csr, cnt, assign, nodes, sources, targets)
        new = loads_from_counts(cnt, assign, ps.degree)
        t_new = epoch(new)
        if _accepted(ps.loads, new, t_now, t_new, ps.unit):
            for j in range(ps.weights.shape[1]):
                w = ps.weights[nodes, j]
                ps.wpart[:, j] += np.bincount(targets, weights=w, minlength=ps.parts).astype(np.int64)
                ps.wpart[:, j] -= np.bincount(sources, weights=w, minlength=ps.parts).astype(np.int64)
            return new, t_new, len(nodes)
        _apply(csr, cnt, assign, nodes, targets, sources)  # undo, retry with the better half
        half = len(nodes) // 2
        nodes, targets = nodes[:half], targets[:half]
    return None


def _accepted(old: list[RankLoad], new: list[RankLoad], t_old: float, t_new: float, unit: np.ndarray) -> bool:
    """Whether a pass's moves are kept: ``M`` and the modelled epoch did not grow, and the ranks' modelled times
    fell (:func:`~gnndist.partition.rank_times.compare`), or stayed and ``(M, total volume)`` fell."""
    m_old = max(max(ld.expand_send, ld.expand_recv) for ld in old)
    m_new = max(max(ld.expand_send, ld.expand_recv) for ld in new)
    v_old, v_new = sum(ld.expand_send for ld in old), sum(ld.expand_send for ld in new)
    order = compare(time_key(load_times(new, unit)), time_key(load_times(old, unit)))
    return m_new <= m_old and t_new <= t_old * (1 + 1e-12) and (
        order < 0 or (order == 0 and (m_new, v_new) < (m_old, v_old)))


def _apply(csr: GlobalCSR, cnt, assign: np.ndarray, nodes, sources, targets) -> None:
    """Move ``nodes`` from ``sources`` to ``targets``, updating the counts of their neighbours in place."""
    pos, owner = entries_of(csr.rowptr, nodes)
    cnt.move_neighbours(csr.col[pos].astype(np.int64), sources[owner], targets[owner])
    assign[nodes] = targets
