"""Measure the cost model's machine constants on the running ranks (``--network probe``, the default of ``auto``)."""

from __future__ import annotations

import time

import numpy as np
import torch

from gnndist.cost import NETWORKS, Network


def probe(grid, csr=None, repeats: int = 5, kernel=None) -> Network:
    """Measure alpha, beta and gamma on the running machine; every rank gets the same values.

    overhead and alpha: all-to-alls of one element per peer on the world and on a 2-rank axis;
    beta: one of 256 KiB per peer; gamma_sparse:
    this rank's SpMM (``csr``, width 32, with the run's ``kernel`` settings); gamma_dense: a 256x256 matmul. Each is the median
    over ``repeats`` runs; the slowest rank's value is taken (all-reduce of the maximum).
    """
    from gnndist.kernels import spmm

    dev = grid.device
    P = grid.world_size

    def median_time(fn) -> float:
        fn()  # warm-up
        ts = []
        for _ in range(repeats):
            grid.synchronize()
            t0 = time.perf_counter()
            fn()
            grid.synchronize()
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts))

    small, small_out = torch.zeros(P, device=dev), torch.empty(P, device=dev)
    big_n = (1 << 16) * P
    big, big_out = torch.zeros(big_n, device=dev), torch.empty(big_n, device=dev)
    t_world = median_time(lambda: grid.all_to_all_single(small_out, small))  # overhead + (P - 1) alpha
    if P > 2 and P % 2 == 0:  # a 2-rank axis gives the second point: overhead + alpha
        pair = grid.axes(2)["row"]
        t_pair = median_time(lambda: grid.all_to_all_single(small_out[:2], small[:2], axis=pair))
        alpha = max(t_world - t_pair, 0.0) / (P - 2)
        overhead = max(t_pair - alpha, 0.0)
    else:
        alpha, overhead = t_world / max(P - 1, 1), 0.0
    t_big = median_time(lambda: grid.all_to_all_single(big_out, big))
    beta = (big_n * 4 * (P - 1) / P) / max(t_big - t_world, 1e-9) if P > 1 else float("inf")
    if csr is not None and csr.nnz:
        x = torch.randn(csr.num_cols, 32, device=dev)
        k = {"impl": kernel.impl, "tune": kernel.tune} if kernel is not None else {}
        gamma_s = median_time(lambda: spmm(csr, x, **k)) / (csr.nnz * 32)
    else:
        gamma_s = NETWORKS["ethernet"].gamma_sparse
    a = torch.randn(256, 256, device=dev)
    gamma_d = median_time(lambda: a @ a) / (2 * 256**3)
    vals = torch.tensor([alpha, 1.0 / beta, gamma_s, gamma_d, overhead], dtype=torch.float64, device=dev)
    grid.all_reduce_(vals, op="max")
    alpha, inv_beta, gamma_s, gamma_d, overhead = vals.tolist()
    return Network("probe", alpha, 1.0 / inv_beta if inv_beta > 0 else float("inf"), gamma_s, gamma_d, overhead)
