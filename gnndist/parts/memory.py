"""A training rank's peak memory, predicted: node tasks and link tasks (``gnndist simulate``'s
``peak_memory_per_rank``, and ``gnndist.parts.simulate``'s layouts).

Peak memory of a training rank (bytes, sparsity-aware layouts; ``peak_memory_per_rank``): what
``train --json`` measures per rank (``per_rank[].peak_memory_bytes``, the resident high-water
mark), for a GCN of widths ``F -> F ... -> F`` (``layers`` layers; :func:`training_peak` takes any
widths): the bytes every moment of the step holds, plus the largest of what a moment adds
(:func:`activation_phases`):

    INTERPRETER_BYTES                                   python, torch, gloo, gnndist (measured constant)
  + 4 (nnz + nnz_t) + 4 (2 rows + halo + 3)             int32 columns of the block's CSRs, and of the
                                                        transposed patterns (1d: the boundary's alone,
                                                        the interior is symmetric; grids: every entry)
  + SPMM_ENTRY_BYTES min(nnz, BLOCK_ENTRIES)            during an SpMM on the CPU (MKL's own copy, the
                                                        broadcast 1 made whole), a block of rows at a time
  + the memory terms of a node part's components       features (4 F rows, mapped), dataset ids, degrees,
    (gnndist.partition.components.NODE_PART)            GCN scaling, halo ids, send plan, labels, masks
  + max over the step's moments of                      (a the activations' bytes per element, 4 or 2)
      the features' dropout                             (4 + 1 [+ a under half]) F rows: its fp32
                                                        output, its mask, its half cast
      layer l's SpMM of width w                         what earlier layers keep + its dropped input
                                                        (a w_in rows, mapping first) + a w (ROW_BUFFERS
                                                        rows + halo + send): the input, its scaled
                                                        copy, the interior and boundary products, the
                                                        rows sent and received; under half + 4 * 2
                                                        min(w, HALF_COLUMNS) rows (the CPU path's fp32
                                                        column chunk of the input and the output)
      layer l >= 1's linear in the backward             what the forward kept + 2 a w_in rows: its
                                                        input rebuilt from the dropout, its gradient

where what a layer keeps is its ReLU output (a w rows; every layer but the last) and the next dropout's
mask (1 w rows, CPU), the features' dropout mask (1 F rows, CPU: the rebuild reuses it), and, for a first
layer that aggregates first (:func:`gnndist.cost.aggregate_first`), its aggregate (a F rows, the
linear map's input). A dropped copy is made again for the backward, not kept
(``RunContext.rebuildable``).

with ``halo`` and ``send`` the rows a rank receives and sends per SpMM (expand, plus fold on a grid).
``benchmarks/README.md`` ("Training memory per adjacency entry") compares it with the measured peak.


A link-prediction rank (``link``: :class:`LinkLoad`) holds the same, plus its slice of the edge split, and its
step and evaluation add moments of their own. With P ranks, N nodes, ``n`` training positives a rank (one step:
the epoch's) and K negatives each, ``d`` the encoder's output width, ``a`` the activations' bytes per element,
``D`` the distinct rows a rank's pairs name, ``n_near`` of them its own (``gnndist/tasks/link.py``, ``pairs.py``,
``scoring.py``, ``metrics.py``):

    held      4 I + 4 N / P             the new ids (int32) of the split's I node ids on the rank (every split), and
                                        the directory's slice (int32)
    moments   8 I + 8 N / P             at the load: the mapped dataset ids (int64), read once for the new ids and
                                        then let go (gnndist.files.drop_mapped)
              32 n K + 5 N              the negatives: drawn (int64), their positions and answers (int32), the
                                        map over N (a flag and an int32 slot per node)
              kept + h + 8 n K + 5 N + 16 D + 2 a d (D - n_near)
                                        the fetch of the distinct rows: the negatives' new ids, the map, the
                                        distinct ids and where they go, the far rows received and the rows this
                                        rank sends (about as many); its own rows are read in h, not copied
              kept + h + 8 n K + a d (2 (D - n_near) + rows) + LINK_BLOCK_BYTES
                                        the loss: the far rows and their gradient, the gradient of h, one block
                                        of pairs
              SCORE_BYTES x scored + RANK_BLOCK_BYTES + h
                                        the exact AUC: every rank's scores of the largest evaluation split, each
                                        class sorted in place, ranked a block of positives at a time

with ``kept`` what the encoder's forward keeps for its backward, ``h`` its output (``a d rows``), and ``D``
estimated as if the pairs' ``2 n (1 + K)`` endpoints were uniform: ``N (1 - exp(-2 n (1 + K) / N))``, of which
``n_near = D rows / N`` the rank's own.
``benchmarks/link_memory.py`` prints the prediction beside the measured peak.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gnndist import cost
from gnndist.kernels.spmm.sparse import BLOCK_ENTRIES, HALF_COLUMNS
from gnndist.partition.components import NODE_PART, RankRows, training_rows_bytes
from gnndist.partition.layouts import GridExchange

ELEM = 4  # bytes per feature element (float32: the input features at every --precision, and fp32's activations)
# bytes per activation element (and per element of an exchanged row) at each --precision: the dtype's itemsize
ACTIVATION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# A rank's resident memory before its part loads (python, torch, gloo, gnndist, Adam's lazy imports): VmRSS
# measured by benchmarks/memory.py on the 2-core CPU machine (benchmarks/README.md, "Training memory per
# adjacency entry"; 389-391 MiB on 2026-12-03 16:30-16:41 UTC, torch 2.13.0; 458 on the same machine an hour
# earlier and 369 on the machines of 2026-12-01/02, for causes not found); the same for every rank and P.
INTERPRETER_BYTES = 390 * 2**20
# A CUDA rank's allocator floor (torch.cuda.max_memory_allocated beside the model's tensors): fitted on an H200
# (issue 50: synthetic-200k-d20, 1 and 2 ranks, hidden 16/64/256; 273 MiB, every point within 15 %); most of it is
# likely Triton's do_bench L2-flush buffer (256 MB) while dispatch times its paths on the first step, not separated
CUDA_BASE_BYTES = 273 * 2**20
INDEX_BYTES = 4  # a column id per entry (int32 below 2**31 entries)
SPMM_ENTRY_BYTES = 8  # per entry during one CPU SpMM: MKL's copy (~3.5 B measured) + the broadcast 1 made whole (4 B)
# [rows, w] tensors an SpMM of width w holds at once: its input, the input scaled by D^-1/2, the interior and the
# boundary products (fitted with MASK_BYTES on the 1M-node graph at P = 2 and 4, hidden 16-256: benchmarks/README.md,
# "Training memory: where the peak is")
ROW_BUFFERS = 4
MASK_BYTES = 1  # a dropout mask: a bool per element, in every dtype
# a block of pairs' transients past the distinct rows (gnndist.tasks.scoring.PAIR_BLOCK_CELLS cells: float32
# and float64 endpoint rows, their gradients, an MLP decoder's activations; about 48 bytes a cell)
LINK_BLOCK_BYTES = 48 * 2**20
# bytes a gathered score takes while the exact AUC runs on a rank: the float32 buffer it is broadcast into, sorted
# in place (gnndist.tasks.metrics.auc_ap); and a block of positives' ranks (metrics.RANK_BLOCK positives: their
# int64 positions among the negatives and the positives, and the float64 precisions)
SCORE_BYTES = 4
RANK_BLOCK_BYTES = 32 * 2**20


@dataclass(frozen=True)
class LinkLoad:
    """A link rank's counts: the inputs of its memory terms (see the module doc).

    Attributes:
        nodes: N; parts: P.
        positives: n, the rank's training positives in one step; negatives: K per positive.
        ids: I, the node ids of the rank's slices of every split's pair arrays.
        scored: the largest evaluation split's scored pairs, every rank's, where the metric gathers them (AUC);
            else 0.
        width: d, the encoder's output width.
    """

    nodes: int
    parts: int
    positives: int
    negatives: int
    ids: int
    scored: int
    width: int

    @classmethod
    def of(cls, split, nodes: int, parts: int, width: int, negatives: int = 1) -> LinkLoad:
        """The counts of one rank of ``parts`` for an :class:`~gnndist.datasets.edge_split.EdgeSplit`."""
        shapes = {name: list(a.shape) for name, a in split.arrays().items()}
        return cls.from_counts(shapes, split.metric, nodes, parts, width, negatives)

    @classmethod
    def from_counts(cls, shapes: dict[str, list[int]], metric: str, nodes: int, parts: int, width: int,
                    negatives: int = 1) -> LinkLoad:
        """The counts of one rank of ``parts`` from the split's array shapes by name (META.json's ``link.counts``)."""
        evals = [shapes[s][0] + shapes[f"{s}_neg"][0] for s in ("valid", "test")]
        ids = sum(math.prod(shape) for shape in shapes.values())
        return cls(nodes, parts, -(-shapes["train"][0] // parts), negatives, -(-ids // parts),
                   max(evals) if metric == "auc" else 0, width)

    def distinct(self) -> int:
        """D: the distinct rows the rank's pairs name (uniform endpoints)."""
        m = 2 * self.positives * (1 + self.negatives)
        return int(self.nodes * -math.expm1(-m / max(self.nodes, 1)))

    def held(self) -> int:
        """Bytes the rank holds from its load on."""
        return 4 * self.ids + 4 * -(-self.nodes // self.parts)

    def moments(self, rows: int, kept: int, act: int) -> list[int]:
        """Bytes each moment of the step and of the evaluation adds (``rows`` owned rows, ``kept`` what the
        encoder's forward keeps, ``act`` bytes an activation element)."""
        nk, d, n, big = self.positives * self.negatives, self.width, self.nodes, self.distinct()
        h, far = act * d * rows, big - min(rows, big * rows // max(n, 1))  # far: D - n_near
        return [8 * self.ids + 8 * -(-n // self.parts),
                32 * nk + 5 * n,
                kept + h + 8 * nk + 5 * n + 16 * big + 2 * act * d * far,
                kept + h + 8 * nk + act * d * (2 * far + rows) + LINK_BLOCK_BYTES,
                SCORE_BYTES * self.scored + RANK_BLOCK_BYTES + h]


def training_peak(nnz: int, nnz_transposed: int, rows: int, halo: int, send: int, widths: Sequence[int],
                  precision: str = "fp32", device: str = "cpu", components=NODE_PART,
                  link: LinkLoad | None = None) -> int:
    """Predicted peak resident bytes of one rank training a GCN of ``widths`` (``[F, hidden..., out]``); see the
    module doc.

    Args:
        nnz: entries of the rank's block; nnz_transposed: entries whose transposed pattern it keeps.
        rows: owned rows; halo, send: rows received and sent per SpMM.
        widths: the model's widths, the input features first.
        precision: ``--precision``: the activations' and buffers' bytes per element (:data:`ACTIVATION_BYTES`).
        device: ``"cpu"`` (resident bytes: the interpreter, MKL's copies, dropout masks) or ``"cuda"`` (bytes
            the CUDA allocator hands out: :data:`CUDA_BASE_BYTES` instead of the interpreter, no MKL copy, and
            no mask: the GPU's hash dropout recomputes it).
        components: what the rank's part holds (:mod:`gnndist.partition.components`; default a node task's).
        link: a link task's counts (:class:`LinkLoad`): its split's bytes, and the moments of its pairs; ``widths``
            are then the encoder's, the last its output rows'.
    """
    index = INDEX_BYTES * (nnz + nnz_transposed) + INDEX_BYTES * (2 * rows + halo + 3)
    part = training_rows_bytes(RankRows(rows, halo, send, nnz, widths[0]), components)  # features, ids, labels, ...
    # the CPU's floor, and an SpMM call's transient copies (MKL's, of one block of rows); the CUDA allocator's floor
    base = CUDA_BASE_BYTES if device == "cuda" else INTERPRETER_BYTES + SPMM_ENTRY_BYTES * min(nnz, BLOCK_ENTRIES)
    held = base + index + part
    phases, kept = _phases(rows, halo, send, widths, precision, device)
    if link is not None:
        held += link.held()
        phases += link.moments(rows, kept, ACTIVATION_BYTES[precision])
    return int(held + max(phases))


def activation_phases(rows: int, halo: int, send: int, widths: Sequence[int], precision: str = "fp32",
                      device: str = "cpu") -> list[int]:
    """Bytes a GCN's step adds at each moment that can be its peak (see the module doc), in order: the features'
    dropout, each layer's forward SpMM, each layer past the first's linear map in the backward. On ``"cuda"`` no
    dropout mask is kept and half rows are multiplied as they are (no fp32 column chunk)."""
    return _phases(rows, halo, send, widths, precision, device)[0]


def _phases(rows: int, halo: int, send: int, widths: Sequence[int], precision: str,
            device: str) -> tuple[list[int], int]:
    """:func:`activation_phases`, and the bytes the forward keeps for the backward at its end."""
    act = ACTIVATION_BYTES[precision]
    cpu = device != "cuda"
    mask = MASK_BYTES if cpu else 0
    feat = widths[0]
    phases = [(ELEM + mask + (act if act != ELEM else 0)) * feat * rows]
    kept = mask * feat * rows  # bytes the forward keeps for the backward so far: the features' dropout mask
    for i, (f_in, f_out) in enumerate(zip(widths[:-1], widths[1:])):
        agg = i == 0 and cost.aggregate_first(f_in, f_out)
        width = f_in if agg else f_out
        dropped = 0 if agg else act * f_in * rows  # the layer's dropped input, alive while it runs
        # half rows are multiplied in fp32 a column chunk at a time on the CPU: the chunk of the input and the output
        chunk = ELEM * min(width, HALF_COLUMNS) * 2 * rows if act != ELEM and cpu else 0
        phases.append(kept + dropped + act * width * (ROW_BUFFERS * rows + halo + send) + chunk)
        kept += act * f_in * rows if agg else 0  # the aggregate, the linear map's saved input
        kept += act * f_out * rows if i < len(widths) - 2 else 0  # the ReLU's output
        kept += mask * f_out * rows if i < len(widths) - 2 else 0  # the next layer's dropout mask
    phases += [kept + 2 * act * w * rows for w in widths[1:-1]]
    return phases, kept


def aware_peaks(ex: GridExchange, widths: Sequence[int], precision: str = "fp32", device: str = "cpu",
                link: LinkLoad | None = None, components=NODE_PART) -> np.ndarray:
    """:func:`training_peak` of every rank of a sparsity-aware layout. ``[P]``.

    1d (c = 1): the interior block (columns of the rank's own rows) is symmetric and keeps no
    transpose; the boundary's transposed pattern is ``nnz - group_nnz[k, k]`` entries. A grid
    layout's blocks are not symmetric: every entry has a transposed copy. ``components``: what a part holds.
    """
    loads = ex.loads()
    own = np.diag(ex.group_nnz) if ex.replication == 1 else np.zeros(len(loads), dtype=np.int64)
    return np.array([training_peak(ld.nnz, ld.nnz - int(own[k]), ld.rows, ld.expand_recv + ld.fold_recv,
                                   ld.expand_send + ld.fold_send, widths, precision, device, components, link)
                     for k, ld in enumerate(loads)], dtype=np.int64)
