"""METIS partitioning, renumbering, halo plans and the on-disk partition format.

    part = partition(data, parts=4)             # METIS(vol), multi-constraint balance
    part.save("out/cora-4", dataset="cora")     # DIR/META.json + DIR/part-K/*.npy
    arrays, meta = load("out/cora-4", rank=1)   # one rank reads only its own part
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gnndist.partition.book import (
    GlobalCSR,
    LocalPart,
    PartitionBook,
    build_local_parts,
    check_parts,
    comm_volume,
    csr_from_edge_index,
    halo_volumes,
    renumbered_csr,
)
from gnndist.partition.format import FORMAT_VERSION, read_meta, read_part, write_partition
from gnndist.partition.layouts import layout_loads, replications
from gnndist.partition.metis import metis_assign, metis_library, random_assign
from tqdm import tqdm

from gnndist.errors import UserError

METHODS = ("metis", "random")
BALANCE = ("nodes", "edges", "train")

__all__ = [
    "BALANCE", "FORMAT_VERSION", "GlobalCSR", "LocalPart", "METHODS", "Partition", "PartitionBook",
    "build_local_parts", "comm_volume", "csr_from_edge_index", "format_report", "load", "metis_assign",
    "partition", "random_assign", "read_meta", "read_part", "replications",
]


def _imbalance(values: np.ndarray) -> float:
    mean = values.mean() if len(values) else 0.0
    return float(values.max() / mean) if mean > 0 else 1.0


@dataclass
class Partition:
    """A partitioned graph held on one machine, ready to be saved for the ranks."""

    data: object  # torch_geometric.data.Data, original ids
    book: PartitionBook
    csr: GlobalCSR  # renumbered (new ids)
    method: str
    objective: str
    seed: int
    report: dict

    def local_parts(self):
        """Yield each rank's :class:`LocalPart` in rank order."""
        return build_local_parts(self.csr, self.book)

    def part_arrays(self):
        """Yield each rank's arrays as saved on disk: graph, plans, features, labels, masks."""
        d = self.data
        for lp in self.local_parts():
            owned = lp.orig_id[: lp.n_owned]
            arrays = {
                "rowptr": lp.rowptr, "col": lp.col, "halo_gid": lp.halo_gid,
                "recv_counts": lp.recv_counts, "send_idx": lp.send_idx, "send_counts": lp.send_counts,
                "orig_id": lp.orig_id, "degree": lp.degree,
                "x": d.x[owned].numpy(), "y": d.y[owned].numpy(),
            }
            for m in ("train_mask", "val_mask", "test_mask"):
                mask = getattr(d, m, None)
                arrays[m] = (mask[owned] if mask is not None else torch.zeros(len(owned), dtype=torch.bool)).numpy()
            yield arrays

    def save(self, out: str | Path, dataset: str, progress: bool = True) -> Path:
        """Write the partition atomically to ``out`` (see :mod:`gnndist.partition.format`)."""
        d = self.data
        y = d.y
        meta = {
            "dataset": dataset, "parts": self.book.parts, "method": self.method,
            "objective": self.objective, "seed": self.seed,
            "N": int(self.csr.num_nodes), "E": int(self.csr.nnz), "F": int(d.x.shape[1]),
            "classes": int(getattr(d, "num_classes", None) or (int(y.max()) + 1 if y.numel() else 0)),
            "multilabel": bool(y.dim() > 1),
            "num_train": int(d.train_mask.sum()) if getattr(d, "train_mask", None) is not None else 0,
            "offsets": self.book.offsets.tolist(),
            "report": self.report,
            # per-rank loads (rows, messages, nonzeros) of every SpMM layout this P admits: auto reads them
            "layouts": layout_loads(self.csr, self.book.offsets),
        }
        parts = tqdm(self.part_arrays(), total=self.book.parts, desc="write parts", unit="part",
                     disable=None if progress else True, leave=False)
        return write_partition(out, meta, parts)


def partition(
    data,
    parts: int,
    method: str = "metis",
    objective: str = "vol",
    seed: int = 0,
    balance: tuple[str, ...] = BALANCE,
    progress: bool = True,
) -> Partition:
    """Partition ``data`` into ``parts`` parts and compute the quality report.

    Args:
        data: ``torch_geometric.data.Data`` with ``x``, ``y``, ``edge_index`` and masks.
            Self-loops and duplicate edges are dropped; the graph is symmetrised.
        parts: number of parts (= ranks), ``1 <= parts <= N``.
        method: ``"metis"`` (default) or ``"random"`` (the baseline).
        objective: METIS objective, ``"vol"`` (communication volume, default) or ``"cut"``.
        seed: seed of METIS / of the random assignment: the same seed gives the same parts.
        balance: METIS balance constraints among ``nodes``, ``edges``, ``train``.
        progress: show a progress bar on a terminal.
    """
    if method not in METHODS:
        raise UserError(f"--method must be one of {list(METHODS)}, got {method!r}")
    unknown = set(balance) - set(BALANCE)
    if unknown:
        raise UserError(f"unknown balance constraint(s) {sorted(unknown)}; choose from {list(BALANCE)}")
    n = int(data.num_nodes)
    check_parts(n, parts)
    t0 = time.perf_counter()
    bar = tqdm(total=4, desc=f"partition into {parts}", unit="step", disable=None if progress else True, leave=False)
    bar.set_postfix_str("symmetrise")
    csr = csr_from_edge_index(data.edge_index, n)
    bar.update()
    bar.set_postfix_str(method)
    degree = csr.degree()
    train = getattr(data, "train_mask", None)
    train = train.numpy().astype(np.int64) if train is not None else np.zeros(n, dtype=np.int64)
    if method == "metis":
        columns = {"nodes": np.ones(n, dtype=np.int64), "edges": degree, "train": train}
        vweights = np.stack([columns[b] for b in balance], axis=1) if balance else None
        assign = metis_assign(csr.rowptr, csr.col, parts, objective, seed, vweights)
    else:
        assign = random_assign(n, parts, seed)
    t_assign = time.perf_counter() - t0
    book = PartitionBook(parts, assign)

    bar.update()
    bar.set_postfix_str("report")
    cross = int((assign[csr.rows()] != assign[csr.col]).sum())
    n_halo, sent = halo_volumes(csr, assign, parts)
    vol = int(n_halo.sum())
    random_vol = vol if method == "random" else comm_volume(csr, random_assign(n, parts, seed), parts)
    bar.update()
    bar.set_postfix_str("renumber")
    new_csr = renumbered_csr(csr, book)
    del csr
    bar.update()
    bar.close()
    n_owned = np.diff(book.offsets)
    nnz = np.diff(new_csr.rowptr[book.offsets])
    report = {
        "parts": parts, "method": method, "objective": objective if method == "metis" else None,
        "seed": seed, "balance": list(balance) if method == "metis" else [], "num_nodes": n, "num_edges": int(new_csr.nnz // 2),
        "edge_cut": cross // 2,
        "comm_volume": int(vol),
        "random_comm_volume": int(random_vol),
        "vs_random": float(vol / random_vol) if random_vol else 1.0,
        "max_send_volume": int(sent.max()),
        "max_recv_volume": int(n_halo.max()),
        "halo_fraction": [float(h / o) if o else 0.0 for h, o in zip(n_halo, n_owned)],
        "nodes_per_part": n_owned.tolist(),
        "imbalance": {
            "nodes": _imbalance(n_owned.astype(float)),
            "edges": _imbalance(nnz.astype(float)),
            "train": _imbalance(np.bincount(assign, weights=train, minlength=parts)),
        },
        "assign_seconds": round(t_assign, 3),
        "metis_lib": metis_library(new_csr.nnz) if method == "metis" else None,
    }
    return Partition(data, book, new_csr, method, objective, seed, report)


def load(root: str | Path, rank: int) -> tuple[dict[str, np.ndarray], dict]:
    """Read part ``rank`` of a saved partition (checksums verified) and its metadata."""
    meta = read_meta(root)
    return read_part(root, rank, meta), meta


def format_report(r: dict) -> str:
    """Human-readable multi-line partition report."""
    hf = r["halo_fraction"]
    imb = r["imbalance"]
    obj = f", objective {r['objective']}" if r.get("objective") else ""
    lines = [
        f"partition: {r['parts']} parts, method {r['method']}{obj}, seed {r['seed']}",
        f"  graph            {r['num_nodes']:,} nodes, {r['num_edges']:,} undirected edges",
        f"  edge cut         {r['edge_cut']:,} ({r['edge_cut'] / max(r['num_edges'], 1):.1%} of edges)",
        f"  comm volume      {r['comm_volume']:,} rows"
        f" (random: {r['random_comm_volume']:,}, ratio {r['vs_random']:.3f})",
        f"  max send / recv  {r['max_send_volume']:,} / {r['max_recv_volume']:,} rows per part",
        f"  halo fraction    max {max(hf):.3f}, mean {sum(hf) / len(hf):.3f} (halo rows / owned rows)",
        f"  imbalance        nodes {imb['nodes']:.3f}, edges {imb['edges']:.3f}, train {imb['train']:.3f} (max/mean)",
    ]
    return "\n".join(lines)
