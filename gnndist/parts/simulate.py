"""``gnndist simulate``: the communication of every layout, counted on the real partition, no processes.

For each part count P the graph is partitioned once (the same partition ``gnndist run``
uses); every layout is then evaluated on that partition's renumbered CSR and offsets:

* sparsity-aware layouts, which move only the rows a nonzero needs (what the runtime does):

  - ``1d`` (c = 1): rank k owns part k's rows and receives its halo (the expand); no fold.
  - ``1.5d`` (1 < c < P, c | P) on a grid of q = P / c row groups by c: rank k = (i, j) with i = k // c, j = k % c.
    Entry (r, col) is multiplied on rank ``blk = (owner(r) // c) * c + owner(col) % c``; rank blk receives input row
    ``col`` once from ``owner(col)`` when ``owner(col) != blk`` (expand) and sends its partial output row ``r`` once
    to ``owner(r)`` when ``owner(r) != blk`` (fold, a sparse reduce-scatter).
  - ``2d``: the same grid with c = sqrt(P) for a square P > 1, so it coincides with ``1.5d``
    at that c; it is reported under both names when that c is in the replication list.

  ``messages`` of a rank is max(expand send peers, expand receive peers) + max(fold send peers, fold receive
  peers). The runtime's measured bytes must equal these counts.

* sparsity-oblivious baselines (CAGNET, Tripathy et al., SC'20, https://arxiv.org/abs/2005.03300), which move whole
  blocks. With n_k the rows of part k, R_i = sum of the c parts of row group i, nnz(A_ig) the nonzeros with rows in
  group i and columns in group g, and words at width F per SpMM forward (the backward moves the same again):

  - ``1d-oblivious``: ring all-gather of X; rank k receives N - n_k rows and sends
    N - n_{(k+1) % P}; P - 1 messages.
  - ``1.5d-oblivious`` (replicated block rows, CAGNET 1.5D; same grid and c as ``1.5d``):
    the q row groups are split into c contiguous column slabs S_j (q / c groups each when
    c | q); rank (i, j) multiplies A_{i, S_j} and receives the slab rows it lacks,
    sum_{g in S_j, g != i} R_g (about N / c - R_i), then ring-all-reduces its R_i partial rows
    in the replica group, 2 (c - 1) / c * R_i rows; sent = received; messages
    |S_j \\ {i}| + 2 (c - 1). CAGNET needs c^2 | P; otherwise the slabs are uneven (empty
    when q < c), which is what that grid would cost.
  - ``2d-oblivious`` (SUMMA on s x s, P = s^2, row and column blocks = the s row groups of
    the c = s grid): rank (r, q) receives the A blocks of its block row it lacks, 3 words per
    nonzero (index pair and value), and the H blocks of its feature column it lacks:
    ``words = 3 * (nnz(A_r:) - nnz(A_rq)) + (N - R_r) * F / s``, bytes = 4 * words;
    sent = received; messages 2 (s - 1).

Memory per rank (bytes; the sparse block with its column ids and row pointers (int32 in the runtime's
sparsity-aware layouts, 8-byte in the baselines), plus the
feature rows of width F it holds during one SpMM, 4-byte floats):

* aware: ``4 nnz + 4 (rows + fold_send + 1) + 4 F (rows + expand_recv + fold_send + fold_recv)``
  (owned rows, halo rows, partial output rows sent and received);
* ``1d-oblivious``: ``8 nnz + 8 (n_k + 1) + 4 F N`` (owned + every gathered row);
* ``1.5d-oblivious``: ``8 nnz + 8 (R_i + 1) + 4 F (R_i + slab rows received + R_i)``
  (owned block row, received slab rows, the partial block row being all-reduced);
* ``2d-oblivious``: ``8 nnz(A_rq) + 8 (R_r + 1) + 4 words + 4 (F / s) R_r`` (own block, every
  received word, own H block).

Peak memory of a training rank (``peak_memory_per_rank``): :mod:`gnndist.parts.memory`, node and link tasks.

Epoch (``layers`` SpMMs of width F, forward and backward): bytes are the per-SpMM bytes
times ``layers``; the modelled time is :func:`gnndist.cost.step_time` of ``layers`` layers
``F -> F`` (per layer the slowest rank's dense work, SpMM and exchanges, then the all-reduce of
the ``F * F * layers`` weight gradients), with the band the calibration's median error
(:data:`gnndist.cost.MODEL_ERROR`) puts around it: ``[T / (1 + e), T / (1 - e)]``. Oblivious loads enter the
cost model as rows of width F (words / F, rounded up); a 2D rank's dense work is that of R_r / s full rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from gnndist import cost
from gnndist.cost import Network, RankLoad
from gnndist.errors import UserError
from gnndist.partition import partition
from gnndist.partition.book import GlobalCSR
from gnndist.partition.components import EDGE_WEIGHTS, NODE_PART
from gnndist.partition.layouts import GridExchange, grid_exchange, grid_loads  # noqa: F401  (public here too)
from gnndist.partition.link import link_of
from gnndist.parts.memory import ACTIVATION_BYTES, ELEM, INDEX_BYTES, LinkLoad, aware_peaks

STRATEGIES = ("1d", "1.5d", "2d", "1d-oblivious", "1.5d-oblivious", "2d-oblivious")
RECORD_KEYS = (
    "parts", "strategy", "replication", "feature_dim", "layers", "max_bytes_per_rank", "total_bytes",
    "max_sent", "max_received", "memory_per_rank", "model_time_s", "model_time_low_s", "model_time_high_s", "vs_1d",
    "max_messages", "nnz_imbalance", "peak_memory_per_rank", "precision", "device",
)


@dataclass
class Layout:
    """One layout's per-rank loads and bytes for one SpMM (forward + backward) at width F.

    Attributes:
        strategy, replication: the name and c.
        loads: rows for the cost model (:func:`gnndist.cost.layout_time`).
        sent, received: ``[P]`` bytes of one forward + backward SpMM.
        memory: ``[P]`` bytes (see the module docstring).
        peak: ``[P]`` predicted training peak (:func:`aware_peaks`), or None (the oblivious baselines).
    """

    strategy: str
    replication: int
    loads: list[RankLoad]
    sent: np.ndarray
    received: np.ndarray
    memory: np.ndarray
    peak: np.ndarray | None = None


def aware_layout(strategy: str, ex: GridExchange, width: int, layers: int = 2, precision: str = "fp32",
                 device: str = "cpu", link: LinkLoad | None = None, components=NODE_PART) -> Layout:
    """The runtime's layout: bytes from :meth:`RankLoad.bytes` (the backward reverses the forward), rows in
    ``precision``'s dtype, the training peak of ranks on ``device`` (of a link task's with ``link``; a part holding
    ``components``)."""
    elem = ACTIVATION_BYTES[precision]
    loads = ex.loads()
    b = [ld.bytes(width, elem) for ld in loads]
    sent = np.array([d["fwd_sent"] + d["bwd_sent"] for d in b], dtype=np.int64)
    received = np.array([d["fwd_received"] + d["bwd_received"] for d in b], dtype=np.int64)
    memory = np.array([INDEX_BYTES * (ld.nnz + ld.rows + ld.fold_send + 1)
                       + elem * width * (ld.rows + ld.expand_recv + ld.fold_send + ld.fold_recv)
                       for ld in loads], dtype=np.int64)
    return Layout(strategy, ex.replication, loads, sent, received, memory,
                  aware_peaks(ex, [width] * (layers + 1), precision, device, link, components))


def _oblivious(strategy: str, c: int, sent_words, recv_words, fold_words, messages, nnz, rows,
               memory, width: int, exchanges=None, elem: int = ELEM) -> Layout:
    """Assemble a baseline from words of one SpMM forward (``elem`` bytes each); the backward moves the same again."""
    sent_words = np.asarray(sent_words, dtype=np.float64)
    recv_words = np.asarray(recv_words, dtype=np.float64)
    fold_words = np.asarray(fold_words, dtype=np.float64)
    up = lambda w: int(math.ceil(w / width - 1e-9))  # noqa: E731  words -> rows of width F
    loads = [RankLoad(expand_send=up(s), expand_recv=up(r), fold_send=up(f), fold_recv=up(f),
                      messages=int(m), nnz=int(z), rows=int(n), exchanges=int(e))
             for s, r, f, m, z, n, e in zip(sent_words, recv_words, fold_words, messages, nnz, rows,
                                            np.ones(len(rows)) if exchanges is None else exchanges)]
    sent = np.rint(2 * elem * (sent_words + fold_words)).astype(np.int64)
    received = np.rint(2 * elem * (recv_words + fold_words)).astype(np.int64)
    return Layout(strategy, c, loads, sent, received, np.rint(np.asarray(memory, dtype=np.float64)).astype(np.int64))


def oblivious_1d(ex: GridExchange, width: int, elem: int = ELEM) -> Layout:
    """CAGNET 1D: ring all-gather of X (``ex`` is the c = 1 exchange, for nnz and part sizes); ``elem`` bytes per
    row element."""
    n = ex.rows
    N, P = int(n.sum()), len(n)
    recv = (N - n) * width
    sent = (N - np.roll(n, -1)) * width  # rank k forwards every block but rank k+1's own
    messages = np.full(P, P - 1)
    memory = 8 * ex.nnz + 8 * (n + 1) + elem * width * N
    return _oblivious("1d-oblivious", 1, sent, recv, np.zeros(P), messages, ex.nnz, n, memory, width, elem=elem)


def oblivious_15d(ex: GridExchange, width: int, elem: int = ELEM) -> Layout:
    """CAGNET 1.5D: replicated block rows, slab broadcasts, all-reduce in the replica group."""
    c = ex.replication
    P = len(ex.rows)
    q = P // c
    R = ex.rows.reshape(q, c).sum(1)  # [q] rows of each row group
    cut = np.arange(c + 1) * q // c  # slab j = row groups [cut[j], cut[j+1])
    i = np.arange(P) // c
    j = np.arange(P) % c
    cum_R = np.concatenate([[0], np.cumsum(R)])
    cum_G = np.concatenate([np.zeros((q, 1), np.int64), np.cumsum(ex.group_nnz, axis=1)], axis=1)  # [q, q+1]
    own_in_slab = (cut[j] <= i) & (i < cut[j + 1])
    slab_rows = (cum_R[cut[j + 1]] - cum_R[cut[j]]) - np.where(own_in_slab, R[i], 0)
    nnz = cum_G[i, cut[j + 1]] - cum_G[i, cut[j]]
    allreduce = 2.0 * (c - 1) / c * R[i]
    messages = (cut[j + 1] - cut[j]) - own_in_slab + 2 * (c - 1)
    memory = 8 * nnz + 8 * (R[i] + 1) + elem * width * (2 * R[i] + slab_rows)
    words = slab_rows * width
    calls = (cut[j + 1] - cut[j]) + 1  # a broadcast per row block of the slab, then the all-reduce
    return _oblivious("1.5d-oblivious", c, words, words, allreduce * width, messages, nnz, R[i], memory, width,
                      calls, elem)


def oblivious_2d(ex: GridExchange, width: int, elem: int = ELEM) -> Layout:
    """CAGNET 2D (SUMMA on s x s): broadcasts of A blocks along rows and H blocks along columns.

    A's words (index pair and value) stay 4 bytes at any ``elem``: counted as ``4 / elem`` row words each.
    """
    s = ex.replication
    P = len(ex.rows)
    R = ex.rows.reshape(s, s).sum(1)  # [s] rows of each block row
    N = int(R.sum())
    r = np.arange(P) // s
    qq = np.arange(P) % s
    G = ex.group_nnz
    nnz = G[r, qq]
    words = 3.0 * ELEM / elem * (G.sum(1)[r] - nnz) + (N - R[r]) * width / s  # in elem-byte words
    messages = np.full(P, 2 * (s - 1))
    memory = 8 * nnz + 8 * (R[r] + 1) + elem * words + elem * width / s * R[r]
    rows = -(-R[r] // s)  # dense work of R_r rows x F / s columns
    return _oblivious("2d-oblivious", s, words, words, np.zeros(P), messages, nnz, rows, memory, width,
                      np.full(P, 2 * s), elem)  # a broadcast of A and one of H per SUMMA stage


def square_root(P: int) -> int | None:
    """s with s * s = P for a square P > 1, else None."""
    s = math.isqrt(P)
    return s if P > 1 and s * s == P else None


def layouts(csr: GlobalCSR, offsets: np.ndarray, width: int, replication: Iterable[int] = (2, 4, 8),
            layers: int = 2, precision: str = "fp32", device: str = "cpu",
            link: LinkLoad | None = None, components=NODE_PART) -> list[Layout]:
    """Every layout at P = len(offsets) - 1: 1d, 1.5d (each c in ``replication`` with c | P, 1 < c < P),
    2d (square P), and their oblivious baselines (``layers``: the training peak's model depth; ``precision``:
    the rows' dtype, :data:`ACTIVATION_BYTES`; ``device``: the ranks', for the training peak; ``link``: a link
    task's counts, :class:`~gnndist.parts.memory.LinkLoad`; ``components``: what a part holds)."""
    P = len(offsets) - 1
    s = square_root(P)
    cs = sorted({c for c in replication if 1 < c < P and P % c == 0})
    exchanges = {c: grid_exchange(csr, offsets, c) for c in sorted({1, *cs, *([s] if s else [])})}
    elem = ACTIVATION_BYTES[precision]
    out = [aware_layout("1d", exchanges[1], width, layers, precision, device, link, components)]
    out += [aware_layout("1.5d", exchanges[c], width, layers, precision, device, link, components) for c in cs]
    if s:
        out.append(aware_layout("2d", exchanges[s], width, layers, precision, device, link, components))
    out.append(oblivious_1d(exchanges[1], width, elem))
    out += [oblivious_15d(exchanges[c], width, elem) for c in cs]
    if s:
        out.append(oblivious_2d(exchanges[s], width, elem))
    return out


def max_bytes_per_rank(layout: Layout, layers: int) -> int:
    """Bytes of one epoch on the busiest rank: max over ranks of max(sent, received)."""
    return int(np.maximum(layout.sent, layout.received).max()) * layers


def record(layout: Layout, width: int, layers: int, net: Network, base_bytes: int, precision: str = "fp32",
           device: str = "cpu") -> dict:
    """One JSON-able record of a layout over one epoch (``layers`` SpMMs of width ``width``, rows in ``precision``).

    ``base_bytes`` is the 1d layout's ``max_bytes_per_rank`` at the same P (for ``vs_1d``,
    which is None when the 1d layout moves nothing and this one does).
    """
    P = len(layout.loads)
    max_bytes = max_bytes_per_rank(layout, layers)
    step = cost.step_time(layout.loads, [cost.Layer(width, width, width)] * layers, net, ACTIVATION_BYTES[precision])
    nnz = np.array([ld.nnz for ld in layout.loads], dtype=np.float64)
    return {
        "parts": P, "strategy": layout.strategy, "replication": layout.replication, "feature_dim": width,
        "layers": layers, "max_bytes_per_rank": max_bytes, "total_bytes": int(layout.sent.sum()) * layers,
        "max_sent": int(layout.sent.max()) * layers, "max_received": int(layout.received.max()) * layers,
        "memory_per_rank": int(layout.memory.max()), "model_time_s": step.total,
        # where the measured epoch falls for the calibration's median error (cost.MODEL_ERROR)
        "model_time_low_s": step.total / (1 + cost.MODEL_ERROR),
        "model_time_high_s": step.total / (1 - cost.MODEL_ERROR),
        "vs_1d": max_bytes / base_bytes if base_bytes else (1.0 if max_bytes == 0 else None),
        "max_messages": max(ld.messages for ld in layout.loads),
        "nnz_imbalance": float(nnz.max() / nnz.mean()) if nnz.mean() > 0 else 1.0,
        "peak_memory_per_rank": [int(b) for b in layout.peak] if layout.peak is not None else None,
        "precision": precision, "device": device,
    }


def simulate_partition(csr: GlobalCSR, offsets: np.ndarray, feature_dim: int = 128, layers: int = 2,
                       replication: Iterable[int] = (2, 4, 8), net: Network | None = None,
                       precision: str = "fp32", device: str = "cpu", link: LinkLoad | None = None,
                       components=NODE_PART) -> list[dict]:
    """Records of every layout on one partition (see :func:`layouts`), 1d first.

    Args:
        csr: renumbered adjacency (``Partition.csr``).
        offsets: ``[P + 1]`` part boundaries (``Partition.book.offsets``).
        feature_dim: F, the width of every layer.
        layers: SpMMs per epoch.
        replication: candidate c of the 1.5D layouts.
        net: cost-model constants (default ``cost.NETWORKS["ib"]``).
        precision: ``--precision``: the dtype of the activations and exchanged rows (:data:`ACTIVATION_BYTES`).
        device: the ranks' device, for the training peak (:func:`~gnndist.parts.memory.training_peak`).
        link: a link task's counts (the peak is then a link rank's).
        components: what a part holds in memory (:mod:`gnndist.partition.components`; default a node task's).
    """
    net = net or cost.NETWORKS["ib"]
    found = layouts(csr, offsets, feature_dim, replication, layers, precision, device, link, components)
    base = max_bytes_per_rank(found[0], layers)
    return [record(lay, feature_dim, layers, net, base, precision, device) for lay in found]


def simulate(data, parts: Sequence[int], feature_dim: int = 128, layers: int = 2,
             replication: Iterable[int] = (2, 4, 8), net: Network | None = None, method: str = "metis",
             objective: str = "vol", seed: int = 0, balance: tuple[str, ...] = ("nodes", "edges", "train"),
             progress: bool = True, precision: str = "fp32", device: str = "cpu") -> list[dict]:
    """Partition ``data`` into each P of ``parts`` and return the records of every layout; on a graph with an edge
    split (an ``ogbl-*`` dataset's, or ``--edge-split``'s message graph), the training peak is a link rank's.

    Args:
        data: a ``torch_geometric.data.Data`` (``gnndist.datasets.load``).
        parts: part counts P, each ``1 <= P <= N``.
        feature_dim, layers, replication, net, precision, device: see :func:`simulate_partition`.
        method, objective, seed, balance: the partitioner's (``gnndist.partition.partition``).
        progress: a progress bar over P on a terminal.
    """
    n = int(data.num_nodes)
    check_inputs(parts, replication, feature_dim, layers, n)
    out = []
    for P in tqdm(parts, desc="simulate", unit="P", disable=None if progress else True):
        p = partition(data, P, method, objective, seed, balance, progress=progress)
        link = None if link_of(data) is None else LinkLoad.of(link_of(data), n, P, feature_dim)
        held = NODE_PART + ((EDGE_WEIGHTS,) if EDGE_WEIGHTS.held(p) else ())  # collab's weights: its recipe's
        for rec in simulate_partition(p.csr, p.book.offsets, feature_dim, layers, replication, net, precision,
                                      device, link, held):
            out.append({**rec, "num_nodes": n, "num_edges": int(p.csr.nnz // 2),
                        "task": "node" if link is None else "link",
                        "network": (net or cost.NETWORKS["ib"]).name, "method": method, "objective": objective})
    return out


def check_inputs(parts: Sequence[int], replication: Iterable[int], feature_dim: int = 1, layers: int = 1,
                 num_nodes: int | None = None) -> None:
    """Raise :class:`UserError` on a part count < 1 or > N, a replication < 2, or a width or depth < 1."""
    if not parts or min(parts) < 1:
        raise UserError(f"--parts must be integers >= 1, got {list(parts)}")
    if feature_dim < 1:
        raise UserError(f"--feature-dim must be >= 1, got {feature_dim}")
    if layers < 1:
        raise UserError(f"--layers must be >= 1, got {layers}")
    if num_nodes is not None and max(parts) > num_nodes:
        raise UserError(f"--parts {max(parts)} exceeds the number of nodes ({num_nodes})")
    bad = [c for c in replication if c < 2]
    if bad:
        raise UserError(f"--replication must be integers >= 2, got {bad}")


def format_table(records: list[dict]) -> str:
    """One line per record: parts, strategy, c, max MiB/rank, vs 1d, total MiB, memory MiB (the SpMM's), the
    training peak per rank (the largest rank's, on the records' device), model ms and its band, messages; then
    what the band means."""
    mib = 1 << 20
    head = f"{'parts':>6} {'strategy':<15} {'c':>3} {'max MiB/rank':>13} {'vs 1d':>7} {'total MiB':>11} " \
           f"{'memory MiB':>11} {'peak MiB':>9} {'model ms':>10} {'band ms':>19} {'messages':>9}"
    lines = [head, "-" * len(head)]
    for r in records:
        vs = f"{r['vs_1d']:.3f}" if r["vs_1d"] is not None else "-"
        band = f"{r['model_time_low_s'] * 1e3:.3f}-{r['model_time_high_s'] * 1e3:.3f}"
        peak = f"{max(r['peak_memory_per_rank']) / mib:.0f}" if r.get("peak_memory_per_rank") else "-"
        lines += [f"{r['parts']:>6} {r['strategy']:<15} {r['replication']:>3} {r['max_bytes_per_rank'] / mib:>13.2f} "
                  f"{vs:>7} {r['total_bytes'] / mib:>11.1f} {r['memory_per_rank'] / mib:>11.2f} {peak:>9} "
                  f"{r['model_time_s'] * 1e3:>10.3f} {band:>19} {r['max_messages']:>9}"]
    lines.append("band: where the measured epoch falls at the cost model's median error, "
                 f"{100 * cost.MODEL_ERROR:.0f} % (worst {100 * cost.MODEL_ERROR_WORST:.0f} %), measured with "
                 "probed constants on a 2-core CPU (benchmarks/README.md, \"Cost model\"); a preset network's "
                 "constants are not measured")
    return "\n".join(lines)
