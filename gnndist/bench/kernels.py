"""Aggregation (SpMM, sum) providers and their timing: gnndist's dispatch vs torch.sparse and PyG.

Used by ``gnndist bench kernels`` and by ``benchmarks/kernels.py`` (the long report with
real graphs and % of copy bandwidth). Bytes are the minimum traffic of a row-parallel
SpMM (index arrays, one source row per edge, one output row per destination); FLOPs ``2 nnz F``.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from gnndist.datasets.graph import clean_edges
from gnndist.kernels import CSR, KernelSettings
from gnndist.kernels.ops import spmm  # the function (``gnndist.kernels.spmm`` is also a subpackage's name)
from gnndist.kernels.spmm.sparse import sparse_matrix

PEERS = ("torch.sparse.mm", "pyg", "index_add_")


def load_coauthor_cs(data: Path) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Coauthor CS's edges from its GraphGallery npz under ``data`` (the datasets' layout): ``(src, dst, n)``."""
    import scipy.sparse as sp

    from gnndist.datasets.npz import SHCHUR

    adj = np.load(data / SHCHUR["coauthor-cs"][3], allow_pickle=True)["adj_matrix"].item()
    coo = sp.coo_matrix(adj)
    return torch.from_numpy(coo.row).long(), torch.from_numpy(coo.col).long(), adj.shape[0]


def load_snap_astroph(data: Path) -> tuple[torch.Tensor, torch.Tensor, int]:
    """SNAP ca-AstroPh's edges from its ``.jlg`` under ``data`` (1-based ids), structure only: ``(src, dst, n)``."""
    from gnndist.datasets.snap import SNAP

    with gzip.open(data / SNAP["ca-astroph"], "rt") as f:
        header = f.readline().split(",")
        edges = np.loadtxt(f, delimiter=",", dtype=np.int64).reshape(-1, 2) - 1  # 1-based ids
    return torch.from_numpy(edges[:, 0]), torch.from_numpy(edges[:, 1]), int(header[0])


def power_law(n: int, avg_degree: float = 16.0, exponent: float = 2.1, seed: int = 0):
    """Chung-Lu graph: both endpoints drawn with probability ``~ i^(-1/(exponent-1))``; ``(src, dst, n)``."""
    g = torch.Generator().manual_seed(seed)
    weight = (torch.arange(n, dtype=torch.float64) + 1.0) ** (-1.0 / (exponent - 1.0))  # [n]
    m = int(n * avg_degree / 2)
    src = torch.multinomial(weight, m, replacement=True, generator=g)
    dst = torch.multinomial(weight, m, replacement=True, generator=g)
    perm = torch.randperm(n, generator=g)  # hubs anywhere in the id range
    return perm[src], perm[dst], n


def symmetric_csr(src: torch.Tensor, dst: torch.Tensor, n: int, index_dtype: torch.dtype = torch.int64) -> CSR:
    """Both directions of every edge, no self loops, no duplicates (the datasets' ``clean_edges``)."""
    edge_index = clean_edges(src.numpy(), dst.numpy(), n)  # [2, E']
    return CSR.from_coo(edge_index[0].to(index_dtype), edge_index[1].to(index_dtype), n, n)


def timed(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Fastest of ``reps`` calls after one warm-up call, in seconds (the least disturbed run on a shared machine)."""
    return min(timed_all(fn, device, reps))


def timed_all(fn: Callable[[], object], device: torch.device, reps: int) -> list[float]:
    """Seconds of each of ``reps`` calls after one warm-up call (CUDA events on a GPU)."""
    fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return times


def copy_bandwidth(device: torch.device, nbytes: int, reps: int) -> float:
    """GB/s of ``dst.copy_(src)`` counting the read and the write."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    return 2 * nbytes / timed(lambda: dst.copy_(src), device, reps) / 1e9


def providers(csr: CSR, device: torch.device,
              settings: KernelSettings = KernelSettings()) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Every SpMM provider on ``csr`` (already on ``device``): name -> ``x [n, F] -> [n, F]``.

    ``gnndist`` is the library's call with the run's ``settings`` (default: dispatch decides, tiles tuned).
    """
    from torch_geometric.nn import SimpleConv

    matrix = sparse_matrix(csr, torch.ones(csr.nnz, device=device))
    edge_index = torch.stack([csr.col.long(), csr.row.long()])  # PyG: [source, target]
    conv = SimpleConv(aggr="add").to(device)
    row, col = csr.row, csr.col
    out = {"gnndist": lambda x: spmm(csr, x, impl=settings.impl, tune=settings.tune)}
    if device.type == "cuda":
        out["triton"] = lambda x: spmm(csr, x, impl="triton")
    out["torch.sparse.mm"] = lambda x: torch.sparse.mm(matrix.to(x.dtype) if x.dtype != matrix.dtype else matrix, x)
    out["pyg"] = lambda x: conv(x, edge_index)
    out["index_add_"] = lambda x: x.new_zeros(csr.n_rows, x.shape[1]).index_add_(0, row, x[col])
    return out


def traffic(csr: CSR, width: int, dtype: torch.dtype) -> tuple[int, int]:
    """``(bytes, flops)`` of one SpMM of width ``width``."""
    elt, idx = torch.finfo(dtype).bits // 8, csr.col.element_size()
    return idx * (csr.n_rows + 1 + csr.nnz) + elt * width * (csr.nnz + csr.n_rows), 2 * csr.nnz * width
