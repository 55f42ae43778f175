"""Node-to-part assignment: METIS (through the library that ``pymetis`` ships) and a random baseline.

``pymetis.part_graph`` copies every index through Python objects and always passes one
balance constraint to METIS, so multi-constraint balance (nodes, edges, training nodes) is
not reachable through it. We call ``METIS_PartGraphKway`` from the same shared library with
ctypes instead: zero-copy numpy arrays, ``ncon`` constraints, ``objtype`` and ``seed`` set.
"""

from __future__ import annotations

import ctypes
import glob
import os
from functools import lru_cache

import numpy as np

from gnndist.errors import UserError

METIS_NOPTIONS = 40
METIS_OK = 1
OBJECTIVES = {"cut": 0, "vol": 1}


@lru_cache(maxsize=1)
def _libmetis() -> tuple[ctypes.CDLL, type]:
    import pymetis
    from pymetis import _internal

    so = glob.glob(os.path.join(os.path.dirname(pymetis.__file__), "_internal*.so"))
    if not so:
        raise RuntimeError("pymetis is installed but its METIS shared library was not found")
    lib = ctypes.CDLL(so[0])
    width = _internal._idx_type_width()
    idx_t = {32: ctypes.c_int32, 64: ctypes.c_int64}[width]
    return lib, idx_t


def _options(lib, idx_t, objective: str, seed: int) -> ctypes.Array:
    from pymetis._internal import options_indices as oi

    opts = (idx_t * METIS_NOPTIONS)()
    lib.METIS_SetDefaultOptions(opts)
    opts[oi.OBJTYPE] = OBJECTIVES[objective]
    opts[oi.SEED] = seed
    opts[oi.NUMBERING] = 0
    return opts


def metis_assign(
    rowptr: np.ndarray,
    col: np.ndarray,
    parts: int,
    objective: str = "vol",
    seed: int = 0,
    vweights: np.ndarray | None = None,
) -> np.ndarray:
    """Assign every node to one of ``parts`` parts with METIS k-way.

    Args:
        rowptr, col: symmetric CSR adjacency without self-loops.
        parts: number of parts (>= 1).
        objective: ``"vol"`` (total communication volume, default) or ``"cut"`` (edge cut).
        seed: METIS random seed; the same inputs and seed give the same assignment.
        vweights: optional ``[N, ncon]`` non-negative integer balance constraints
            (e.g. ones, degree, training flag). Columns that sum to zero are dropped.

    Shapes:
        rowptr ``[N + 1]``, col ``[nnz]`` -> assignment ``[N]`` int64 in ``[0, parts)``.
    """
    if objective not in OBJECTIVES:
        raise UserError(f"--objective must be one of {sorted(OBJECTIVES)}, got {objective!r}")
    n = len(rowptr) - 1
    if parts == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    lib, idx_t = _libmetis()
    np_idx = np.int64 if idx_t is ctypes.c_int64 else np.int32

    xadj = np.ascontiguousarray(rowptr, dtype=np_idx)
    adjncy = np.ascontiguousarray(col, dtype=np_idx)
    if adjncy.size == 0:  # METIS rejects edgeless graphs: split the nodes evenly instead
        return (np.arange(n, dtype=np.int64) * parts) // n
    if vweights is None:
        vweights = np.ones((n, 1), dtype=np_idx)
    vweights = vweights[:, vweights.sum(axis=0) > 0]
    vwgt = np.ascontiguousarray(vweights, dtype=np_idx)
    ncon = idx_t(vwgt.shape[1])
    nvtxs = idx_t(n)
    nparts = idx_t(parts)
    edgecut = idx_t(0)
    part = np.empty(n, dtype=np_idx)
    ptr = ctypes.POINTER(idx_t)

    def p(a: np.ndarray):
        return a.ctypes.data_as(ptr)

    status = lib.METIS_PartGraphKway(
        ctypes.byref(nvtxs), ctypes.byref(ncon), p(xadj), p(adjncy), p(vwgt),
        None, None, ctypes.byref(nparts), None, None,
        _options(lib, idx_t, objective, seed), ctypes.byref(edgecut), p(part),
    )
    if status != METIS_OK:
        raise RuntimeError(f"METIS_PartGraphKway failed with status {status}")
    return part.astype(np.int64, copy=False)


def random_assign(n: int, parts: int, seed: int = 0) -> np.ndarray:
    """Balanced random assignment: a seeded permutation dealt round-robin into ``parts`` parts.

    Shapes:
        -> assignment ``[n]`` int64 in ``[0, parts)``.
    """
    rng = np.random.default_rng(seed)
    assign = np.empty(n, dtype=np.int64)
    assign[rng.permutation(n)] = np.arange(n, dtype=np.int64) % parts
    return assign
