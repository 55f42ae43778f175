"""Partitioner backends behind one interface: ``metis | kaminpar | hypergraph | random``.

Each backend takes the symmetric CSR (no self-loops), ``[N, ncon]`` node weights and their
tolerances, and returns an assignment ``[N]`` in ``[0, parts)``. Each can say why it cannot
take an input (:meth:`Backend.unsupported`: one line naming an alternative), and which
library and version it ran (:meth:`Backend.library`). They are chosen from :data:`BACKENDS`
by name (``--method``); ``--balance auto`` asks :func:`gnndist.partition.plan.auto_plan`
which of them fit a graph.

* ``metis``: METIS k-way through ctypes (:mod:`gnndist.partition.metis`), several balance
  constraints, objective ``vol`` or ``cut``.
* ``kaminpar``: KaMinPar (Gottesbüren et al., ESA 2021), edge cut, one node weight; fast and
  memory-lean at billions of entries. Handed the graph as a ParHIP binary file (its Python
  API reads graphs from files only), 32-bit ids where they fit. Its preset (context) and whether it
  holds the graph compressed are chosen by size (:func:`kaminpar_preset`; the report's ``kaminpar``
  says which ran and why): above :data:`KAMINPAR_TERAPART_ENTRIES` (2^23) its memory-lean ``terapart``
  preset on the compressed graph, below its ``default`` preset on the graph as read. The table behind
  the rule is ``benchmarks/kaminpar_presets.py``'s (``benchmarks/results/kaminpar-presets-2026-12-04-2core.json``):
  ``fast`` is the quickest but gives up to 1.06x ``default``'s halo volume on the shared graphs (one thread)
  and 1.7-1.9x ``terapart``'s peak on the SBMs; ``terapart`` holds the least for the same cut there.
* ``hypergraph``: Mt-KaHyPar (Gottesbüren et al., 2022) on the column-net hypergraph whose net
  ``v`` is ``{v} + N(v)``: its connectivity - 1 (km1) metric *is* the 1D halo volume, rows x
  ranks that need them. The ``DETERMINISTIC`` preset, so a seed gives the same parts.
* ``random``: the balanced random baseline (:func:`gnndist.partition.metis.random_assign`).

Threads and determinism (:meth:`Backend.threads_used`, :meth:`Backend.determinism`; the report says
both): the threaded backends take ``--threads`` (default: every core of the process). Mt-KaHyPar's
deterministic preset gives the same parts at any thread count (the same sha256 of the parts of
Amazon Photo at 1 and 2 threads). KaMinPar's Python binding has no deterministic mode: above one
thread its parts may vary run to run (they did here at 2), so ``--threads 1`` is the way to repeat
them, except under its ``terapart`` preset (above 2^23 entries), whose parts varied at one thread too.
pymetis runs METIS on one thread, deterministic; ``random`` is seeded.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

import numpy as np
from gnndist.partition.book import GlobalCSR
from gnndist.partition.metis import OBJECTIVES, metis_assign, metis_library, random_assign

from gnndist.errors import UserError
from gnndist.machine import cores


def resolve_threads(threads: int) -> int:
    """``--threads``: 0 is every core of this process (:func:`cores`), else at least 1."""
    if threads < 0:
        raise UserError(f"--threads must be 0 (every core) or a positive count, got {threads}")
    return threads or cores()


# KaMinPar's size rule (kaminpar_preset), from benchmarks/kaminpar_presets.py's table (2 cores, load 10-34): on
# the shared graphs (0.16-1.6M entries, P = 4, 8) every preset is under 0.6 CPU s and `fast` gives up to 1.06x
# `default`'s halo volume at one thread: `default`, as read. On the 19.9M-entry SBM (P = 4) `terapart` has the
# least peak, 10.5 B per entry against `default`'s 11.7-13.2 compressed and 16.3-17.0 not, for 12.0-12.2 CPU s
# against 10.5-12.7 compressed, the same halo volume (+-0.05 %); at 49.7M 10.7 against 11.9 B (`fast`: 19.9 B),
# 37 against 32 CPU s.
KAMINPAR_COMPRESS_ENTRIES = 1 << 23  # above this KaMinPar compresses the graph it holds
KAMINPAR_TERAPART_ENTRIES = 1 << 23  # ... and runs its memory-lean terapart preset (was above 2^25)
KAMINPAR_PRESETS = ("default", "fast", "terapart")  # the contexts measured; kaminpar.context_by_name has more
HYPERGRAPH_PRESET = "DETERMINISTIC"


@dataclass(frozen=True)
class Request:
    """What one partitioner call is asked for.

    Attributes:
        parts: P.
        weights: ``[N, ncon]`` non-negative integer node weights (None: every node weighs 1).
        tolerances: ``[ncon]`` allowed heaviest part / mean part, each > 1 (None: 1.03).
        seed: the seed; the same request and seed give the same assignment.
        objective: METIS's ``vol`` or ``cut`` (the other backends have one objective each).
        threads: threads the partitioner may use (>= 1; the CLI's 0, every core, is resolved before).
    """

    parts: int
    weights: np.ndarray | None = None
    tolerances: np.ndarray | None = None
    seed: int = 0
    objective: str = "vol"
    threads: int = 1

    @property
    def constraints(self) -> int:
        return 1 if self.weights is None else int((self.weights.reshape(len(self.weights), -1).sum(0) > 0).sum())

    def single(self, n: int) -> tuple[np.ndarray, float]:
        """The one weight column (ones when none) and its tolerance, for one-constraint backends."""
        w = np.ones(n, dtype=np.int64) if self.weights is None else self.weights.reshape(n, -1)
        if w.ndim == 2:
            used = np.flatnonzero(w.sum(0) > 0)
            w = w[:, used[0]] if len(used) else np.ones(n, dtype=np.int64)
            tol = float(np.asarray(self.tolerances)[used[0]]) if self.tolerances is not None and len(used) else 1.03
        else:
            tol = float(np.asarray(self.tolerances).ravel()[0]) if self.tolerances is not None else 1.03
        return np.asarray(w, dtype=np.int64), tol


class Backend:
    """One partitioner: :meth:`assign` and its declared capabilities."""

    name: str = ""
    package: str | None = None  # the pip package it needs, if any
    objective: str = ""  # what it minimises, for the report

    def available(self) -> str | None:
        """None when the backend's library imports, else a one-line reason saying how to install it."""
        if self.package is None:
            return None
        try:
            __import__(self.package)
        except ImportError:
            return (f"--method {self.name} needs the {self.package} package: pip install {self.package} "
                    f"(or `make install`)")
        return None

    def unsupported(self, csr: GlobalCSR, req: Request) -> str | None:
        """None when the backend can take this input, else one line saying why and what to use instead."""
        return self.available()

    def assign(self, csr: GlobalCSR, req: Request) -> np.ndarray:
        """Assignment ``[N]`` int64 in ``[0, req.parts)``; raises :class:`UserError` when unsupported."""
        raise NotImplementedError

    def library(self, nnz: int = 0) -> str:
        """The library and version this backend runs, e.g. ``kaminpar 3.7.3``."""
        return f"{self.package} {_version(self.package)}" if self.package else "gnndist"

    def threads_used(self, threads: int) -> int:
        """The threads this backend runs on when given ``threads`` (one, for a single-threaded library)."""
        return 1

    def report_fields(self, nnz: int) -> dict:
        """The report's fields of how this backend runs on a graph of ``nnz`` adjacency entries (none by default)."""
        return {}

    def determinism(self, threads: int, nnz: int = 0) -> tuple[bool, str]:
        """Whether the same input and seed give the same parts at ``threads`` threads on a graph of ``nnz``
        adjacency entries, and why."""
        return True, f"{self.name}: single-threaded and seeded"

    def _check(self, csr: GlobalCSR, req: Request) -> None:
        why = self.unsupported(csr, req)
        if why:
            raise UserError(why)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


class Metis(Backend):
    name, package, objective = "metis", "pymetis", "vol or cut (--objective)"

    def assign(self, csr: GlobalCSR, req: Request) -> np.ndarray:
        self._check(csr, req)
        return metis_assign(csr.rowptr, csr.col, req.parts, req.objective, req.seed, req.weights, req.tolerances)

    def library(self, nnz: int = 0) -> str:
        lib = metis_library(nnz)
        return f"pymetis {_version('pymetis')}" if lib == "pymetis" else lib

    def unsupported(self, csr: GlobalCSR, req: Request) -> str | None:
        if req.objective not in OBJECTIVES:
            return f"--objective must be one of {sorted(OBJECTIVES)}, got {req.objective!r}"
        return self.available()


class Random(Backend):
    name, objective = "random", "none (baseline)"

    def assign(self, csr: GlobalCSR, req: Request) -> np.ndarray:
        return random_assign(csr.num_nodes, req.parts, req.seed)


class OneWeight(Backend):
    """A backend that balances one node weight (KaMinPar, Mt-KaHyPar)."""

    def unsupported(self, csr: GlobalCSR, req: Request) -> str | None:
        if req.constraints > 1:
            return (f"--method {self.name} balances one node weight, not {req.constraints} constraints; "
                    "use --method metis for several (or --balance with one constraint)")
        return self.available()


@dataclass(frozen=True)
class KaMinParPreset:
    """The KaMinPar context that runs (``kaminpar.context_by_name``), whether it holds the graph compressed,
    and why (the report's ``kaminpar``)."""

    preset: str
    compress: bool
    why: str

    def fields(self) -> dict:
        return {"preset": self.preset, "compressed": self.compress, "why": self.why}


def kaminpar_preset(nnz: int, preset: str = "auto", compress: bool | None = None) -> KaMinParPreset:
    """KaMinPar's preset and compression for a graph of ``nnz`` adjacency entries, and why.

    ``auto`` (the default) chooses by size: ``terapart`` above :data:`KAMINPAR_TERAPART_ENTRIES`, else
    ``default``. A named preset (:data:`KAMINPAR_PRESETS`) runs as asked. The graph is held compressed above
    :data:`KAMINPAR_COMPRESS_ENTRIES` unless ``compress`` says otherwise, and always under ``terapart`` (on an
    uncompressed graph its Python binding crashes: a one-line :class:`UserError` when asked).
    """
    if preset != "auto" and preset not in KAMINPAR_PRESETS:
        raise UserError(f"the KaMinPar preset must be auto or one of {list(KAMINPAR_PRESETS)}, got {preset!r}")
    terapart, compressed = _log2(KAMINPAR_TERAPART_ENTRIES), _log2(KAMINPAR_COMPRESS_ENTRIES)
    if preset != "auto":
        why = f"preset {preset} asked"
    elif nnz > KAMINPAR_TERAPART_ENTRIES:
        preset, why = "terapart", f"{nnz:,} entries > 2^{terapart}: terapart, the leanest preset at the same cut"
    else:
        preset, why = "default", f"{nnz:,} entries <= 2^{terapart}: the default preset"
    if preset == "terapart" and compress is False:  # its binding then crashes (SIGSEGV, kaminpar 3.7.3)
        raise UserError("KaMinPar's terapart preset runs on a compressed graph only; leave compression on")
    if preset == "terapart" and compress is None:
        compress, why = True, why + "; compressed: terapart runs on a compressed graph only"
    elif compress is None:
        compress = nnz > KAMINPAR_COMPRESS_ENTRIES
        why += f"; {'compressed' if compress else 'not compressed'}: {nnz:,} entries " \
               f"{'>' if compress else '<='} 2^{compressed}"
    else:
        why += f"; {'compressed' if compress else 'not compressed'} as asked"
    return KaMinParPreset(preset, compress, why)


def _log2(x: int) -> int:
    return x.bit_length() - 1


class KaMinPar(OneWeight):
    """KaMinPar at a preset (``auto``: by size, :func:`kaminpar_preset`; a named one for the benchmarks)."""

    name, package, objective = "kaminpar", "kaminpar", "edge cut"

    def __init__(self, preset: str = "auto", compress: bool | None = None):
        kaminpar_preset(0, preset, compress)  # a bad name fails here, not at the first graph
        self.preset, self.compress = preset, compress

    def choice(self, nnz: int) -> KaMinParPreset:
        """The preset and compression this backend runs on a graph of ``nnz`` adjacency entries, and why."""
        return kaminpar_preset(nnz, self.preset, self.compress)

    def report_fields(self, nnz: int) -> dict:
        return {"kaminpar": self.choice(nnz).fields()}

    def threads_used(self, threads: int) -> int:
        return max(threads, 1)

    def determinism(self, threads: int, nnz: int = 0) -> tuple[bool, str]:
        if self.choice(nnz).preset == "terapart":
            # kaminpar 3.7.3: the same seeded one-thread terapart call gave two different parts, by the process's
            # earlier calls and, under load, from run to run (a fresh process's calls: d10f.. 6bd2.. 6bd2.., and
            # after a default call 6bd2.. then d10f.. or 6bd2..): no setting repeats them
            return False, ("kaminpar's terapart preset: the parts may vary run to run, at any thread count "
                           "(kaminpar 3.7.3); --method metis or hypergraph repeat theirs")
        if threads <= 1:
            return True, "kaminpar: one thread, seeded"
        return False, (f"kaminpar on {threads} threads: the parts may vary run to run (its Python binding has no "
                       "deterministic mode); --threads 1 repeats them")

    def assign(self, csr: GlobalCSR, req: Request) -> np.ndarray:
        self._check(csr, req)
        n = csr.num_nodes
        if req.parts == 1 or n == 0:
            return np.zeros(n, dtype=np.int64)
        import kaminpar

        w, tol = req.single(n)
        weighted = not bool((w == 1).all())
        run = self.choice(csr.nnz)
        fd, path = tempfile.mkstemp(prefix="gnndist-kaminpar-", suffix=".parhip")
        try:
            with os.fdopen(fd, "wb") as f:
                write_parhip(f, csr, w if weighted else None)
            kaminpar.reseed(req.seed)
            graph = kaminpar.load_graph(path, kaminpar.GraphFileFormat.PARHIP, compress=run.compress)
        except OSError as e:
            raise UserError(f"cannot hand the graph to KaMinPar through {path}: {e.strerror or e}") from None
        finally:
            if os.path.exists(path):
                os.unlink(path)
        ctx = kaminpar.context_by_name(run.preset)
        out = kaminpar.KaMinPar(max(req.threads, 1), ctx).compute_partition(graph, req.parts, max(tol - 1.0, 1e-4))
        del graph
        return np.asarray(out, dtype=np.int64)


def write_parhip(f, csr: GlobalCSR, vweights: np.ndarray | None = None, chunk: int = 1 << 24) -> None:
    """Write ``csr`` as a ParHIP binary graph (KaMinPar's extension: 32-bit ids and offsets where they fit).

    Layout: 3 x u64 header (version bits, n, m), ``n + 1`` offsets (byte addresses of each row's
    first neighbour), ``m`` neighbour ids, then ``n`` vertex weights if any. Version bits, from the
    least significant: no edge weights, no vertex weights, 32-bit offsets, 32-bit ids, 32-bit
    vertex weights, 32-bit edge weights. Written in chunks: never a second copy of ``col``.
    """
    n, m = csr.num_nodes, csr.nnz
    small = 24 + (n + 1) * 4 + m * 4 < 2**32 and (vweights is None or int(vweights.max(initial=0)) < 2**31)
    vid = np.uint32 if small else np.uint64  # ids, offsets and vertex weights alike
    item = np.dtype(vid).itemsize
    version = 1 | (0 if vweights is not None else 2) | (4 | 8 | 16 | 32 if small else 0)
    base = 24 + (n + 1) * item
    np.array([version, n, m], dtype=np.uint64).tofile(f)
    for r0 in range(0, n + 1, chunk):
        (csr.rowptr[r0 : r0 + chunk].astype(np.uint64) * np.uint64(item) + np.uint64(base)).astype(vid).tofile(f)
    for e0 in range(0, m, chunk):
        csr.col[e0 : e0 + chunk].astype(vid).tofile(f)
    if vweights is not None:
        np.asarray(vweights).astype(vid).tofile(f)


@lru_cache(maxsize=1)
def _mtkahypar(threads: int):
    """Mt-KaHyPar's process-wide initializer on ``threads`` threads (initialised again for another count)."""
    import mtkahypar

    return mtkahypar.initialize(threads, False)


class Hypergraph(OneWeight):
    name, package, objective = "hypergraph", "mtkahypar", "km1 of the column-net hypergraph = halo volume"

    def threads_used(self, threads: int) -> int:
        return max(threads, 1)

    def determinism(self, threads: int, nnz: int = 0) -> tuple[bool, str]:
        return True, f"hypergraph: Mt-KaHyPar's {HYPERGRAPH_PRESET} preset, the same parts at any thread count"

    def assign(self, csr: GlobalCSR, req: Request) -> np.ndarray:
        self._check(csr, req)
        n = csr.num_nodes
        if req.parts == 1 or n == 0:
            return np.zeros(n, dtype=np.int64)
        import mtkahypar

        init = _mtkahypar(max(req.threads, 1))  # its deterministic preset gives the same parts at any thread count
        mtkahypar.set_seed(req.seed)
        ctx = init.context_from_preset(getattr(mtkahypar.PresetType, HYPERGRAPH_PRESET))
        w, tol = req.single(n)
        ctx.set_partitioning_parameters(req.parts, max(tol - 1.0, 1e-4), mtkahypar.Objective.KM1)
        ctx.logging = False
        nets = column_nets(csr)
        hg = (init.create_hypergraph(ctx, n, n, nets) if (w == 1).all() else
              init.create_hypergraph(ctx, n, n, nets, w.tolist(), [1] * n))
        del nets
        return np.asarray(hg.partition(ctx).get_partition(), dtype=np.int64)


def column_nets(csr: GlobalCSR) -> list[list[int]]:
    """The column-net hypergraph's nets, ``[v] + N(v)`` per node ``v`` (its km1 is the 1D halo volume)."""
    nets = []
    for r0 in range(0, csr.num_nodes, 1 << 16):
        r1 = min(r0 + (1 << 16), csr.num_nodes)
        seg = csr.col[csr.rowptr[r0] : csr.rowptr[r1]].tolist()
        bounds = (csr.rowptr[r0 : r1 + 1] - csr.rowptr[r0]).tolist()
        nets.extend([v] + seg[bounds[i] : bounds[i + 1]] for i, v in enumerate(range(r0, r1)))
    return nets


BACKENDS: dict[str, Backend] = {b.name: b for b in (Metis(), KaMinPar(), Hypergraph(), Random())}


def backend(name: str) -> Backend:
    """The backend called ``name``; a one-line :class:`UserError` listing the choices otherwise."""
    if name not in BACKENDS:
        raise UserError(f"--method must be one of {list(BACKENDS)}, got {name!r}")
    return BACKENDS[name]
