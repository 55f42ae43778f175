"""Node-to-part assignment: METIS k-way through ctypes, and a random baseline.

``pymetis.part_graph`` copies every index through Python objects and always passes one
balance constraint to METIS, so multi-constraint balance (nodes, edges, training nodes) is
not reachable through it. We call ``METIS_PartGraphKway`` with ctypes instead: zero-copy
numpy arrays, ``ncon`` constraints, ``objtype`` and ``seed`` set. The library is a system
``libmetis.so.5`` with 32-bit indices when installed (Debian's ``libmetis5``; half the
memory), else the 64-bit one inside the ``pymetis`` wheel.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import sys
from functools import lru_cache

import numpy as np

from gnndist.errors import UserError

METIS_NOPTIONS = 40
METIS_OK = 1
OBJECTIVES = {"cut": 0, "vol": 1}


def _idx_width(lib: ctypes.CDLL) -> int:
    """Width of METIS's ``idx_t`` in a library: let it fill a default-options array and look how far it wrote."""
    buf = (ctypes.c_int32 * (2 * METIS_NOPTIONS))()
    lib.METIS_SetDefaultOptions(buf)
    return 32 if all(v == 0 for v in buf[METIS_NOPTIONS:]) else 64


def _pymetis_lib() -> tuple[ctypes.CDLL, int]:
    import pymetis
    from pymetis import _internal

    so = glob.glob(os.path.join(os.path.dirname(pymetis.__file__), "_internal*.so"))
    if not so:
        raise RuntimeError("pymetis is installed but its METIS shared library was not found")
    return ctypes.CDLL(so[0]), _internal._idx_type_width()


@lru_cache(maxsize=4)
def _libmetis(nnz: int = 0) -> tuple[ctypes.CDLL, type, str]:
    """The METIS library to call: a system ``libmetis.so.5`` with 32-bit indices when one is installed
    and the graph fits (half the memory of pymetis's 64-bit build), else the one pymetis ships.

    ``GNNDIST_METIS_LIB`` names a library file, or ``pymetis`` to force the bundled one.
    The same seed gives the same parts with the same library; different builds may differ.
    """
    choice = os.environ.get("GNNDIST_METIS_LIB", "")
    candidates = [] if choice == "pymetis" else [choice or "libmetis.so.5"]
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            if choice:
                raise UserError(f"GNNDIST_METIS_LIB={choice}: cannot load it") from None
            continue
        width = _idx_width(lib)
        if width == 64 or nnz < 2**31 - 1:
            return lib, {32: ctypes.c_int32, 64: ctypes.c_int64}[width], name
    lib, width = _pymetis_lib()
    return lib, {32: ctypes.c_int32, 64: ctypes.c_int64}[width], "pymetis"


def metis_library(nnz: int = 0) -> str:
    """Name of the METIS library a graph with ``nnz`` adjacency entries is partitioned with."""
    return _libmetis(2**31 if nnz >= 2**31 - 1 else 0)[2]


def metis_index_bytes(nnz: int = 0) -> int:
    """Bytes of the ``idx_t`` of the METIS library a graph with ``nnz`` adjacency entries is partitioned with
    (4 for a 32-bit build, 8 for pymetis's usual 64-bit one)."""
    return ctypes.sizeof(_libmetis(2**31 if nnz >= 2**31 - 1 else 0)[1])


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
    tolerances: np.ndarray | None = None,
) -> np.ndarray:
    """Assign every node to one of ``parts`` parts with METIS k-way.

    Args:
        rowptr, col: symmetric CSR adjacency without self-loops.
        parts: number of parts (>= 1).
        objective: ``"vol"`` (total communication volume, default) or ``"cut"`` (edge cut).
        seed: METIS random seed; the same inputs and seed give the same assignment.
        vweights: optional ``[N, ncon]`` non-negative integer balance constraints
            (e.g. ones, degree, training flag). Columns that sum to zero are dropped.
        tolerances: optional ``[ncon]`` allowed max-part / mean-part weight per constraint
            (METIS ``ubvec``, each > 1; METIS's default is 1.03 for every constraint).

    Shapes:
        rowptr ``[N + 1]``, col ``[nnz]`` -> assignment ``[N]`` int64 in ``[0, parts)``.
    """
    if objective not in OBJECTIVES:
        raise UserError(f"--objective must be one of {sorted(OBJECTIVES)}, got {objective!r}")
    n = len(rowptr) - 1
    if parts == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    lib, idx_t, _ = _libmetis(2**31 if len(col) >= 2**31 - 1 else 0)  # 32-bit indices only when they fit
    np_idx = np.int64 if idx_t is ctypes.c_int64 else np.int32

    xadj = np.ascontiguousarray(rowptr, dtype=np_idx)
    adjncy = np.ascontiguousarray(col, dtype=np_idx)
    if adjncy.size == 0:  # METIS rejects edgeless graphs: split the nodes evenly instead
        return (np.arange(n, dtype=np.int64) * parts) // n
    vwgt, ubvec = _balance(lib, idx_t, np_idx, vweights, tolerances, n)
    ncon = idx_t(vwgt.shape[1])
    nvtxs = idx_t(n)
    nparts = idx_t(parts)
    edgecut = idx_t(0)
    part = np.empty(n, dtype=np_idx)
    ptr = ctypes.POINTER(idx_t)

    def p(a: np.ndarray):
        return a.ctypes.data_as(ptr)

    with _c_stdout_to_stderr():  # METIS prints its warnings with printf: keep stdout for our output (--json)
        status = lib.METIS_PartGraphKway(
            ctypes.byref(nvtxs), ctypes.byref(ncon), p(xadj), p(adjncy), p(vwgt),
            None, None, ctypes.byref(nparts), None, ubvec,
            _options(lib, idx_t, objective, seed), ctypes.byref(edgecut), p(part),
        )
    if status != METIS_OK:  # METIS_ERROR (-4) when too many parts for its balance constraints
        why = {-2: "input error", -3: "out of memory",
               -4: "could not meet its balance constraints"}.get(status, "error")
        hint = " (fewer constraints, e.g. --balance nodes, or fewer parts may work)" if ncon.value > 1 else ""
        raise UserError(f"METIS failed to cut {n:,} nodes into {parts} parts: {why}, status {status}{hint}")
    return part.astype(np.int64, copy=False)


def _balance(lib, idx_t, np_idx, vweights: np.ndarray | None, tolerances: np.ndarray | None, n: int):
    """METIS's ``vwgt`` ``[N, ncon]`` (columns that sum to zero dropped; one column of ones by default) and
    ``ubvec`` (their tolerances as ``real_t``, or None for METIS's default)."""
    if vweights is None:
        vweights = np.ones((n, 1), dtype=np_idx)
    used = vweights.sum(axis=0) > 0
    vwgt = np.ascontiguousarray(vweights[:, used], dtype=np_idx)
    if tolerances is None:
        return vwgt, None
    real_t = _real_type(lib, idx_t)
    return vwgt, (real_t * int(used.sum()))(*(float(t) for t in np.asarray(tolerances)[used]))


@lru_cache(maxsize=4)
def _real_type(lib: ctypes.CDLL, idx_t: type) -> type:
    """METIS's ``real_t`` (float or double): partition a 2-node graph with ``ubvec`` passed as two floats 1.5.

    Read as one double those bytes are about 0.1, which METIS rejects (tolerances must exceed 1).
    """
    two = (idx_t * 3)(0, 1, 2), (idx_t * 2)(1, 0)
    part, one, objval = (idx_t * 2)(), idx_t(1), idx_t(0)
    ub = (ctypes.c_float * 2)(1.5, 1.5)
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(1)
    try:
        os.dup2(devnull, 1)  # a double-width METIS prints "Input Error" with printf
        status = lib.METIS_PartGraphKway(ctypes.byref(idx_t(2)), ctypes.byref(one), two[0], two[1], None, None, None,
                                         ctypes.byref(idx_t(2)), None, ub, None, ctypes.byref(objval), part)
        ctypes.CDLL(None).fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    return ctypes.c_float if status == METIS_OK else ctypes.c_double


@contextlib.contextmanager
def _c_stdout_to_stderr():
    """Point file descriptor 1 at standard error while C code runs, flushing C's buffers on both sides."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        libc.fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def random_assign(n: int, parts: int, seed: int = 0) -> np.ndarray:
    """Balanced random assignment: a seeded permutation dealt round-robin into ``parts`` parts.

    Shapes:
        -> assignment ``[n]`` int64 in ``[0, parts)``.
    """
    rng = np.random.default_rng(seed)
    assign = np.empty(n, dtype=np.int64)
    assign[rng.permutation(n)] = np.arange(n, dtype=np.int64) % parts
    return assign
