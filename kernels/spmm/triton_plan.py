"""The segment plan of the Triton SpMM: a CSR's rows cut into segments of at most ``C`` edges.

A row of up to ``C`` edges is one segment and writes its output row directly; a longer row
(the hubs of a power-law graph) is cut into ``ceil(deg / C)`` chunks that write fp32
partial rows, added up in chunk order afterwards. Segments are ordered by class, each
sorted by length (descending; ties in row order):

    chunks   the pieces of rows longer than ``C``
    medium   whole rows of ``d_short < len <= C``
    short    whole rows of ``len <= d_short``

Built once per CSR, chunk length and short-row length on the device, and kept on the CSR
(:func:`plan_for`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..csr import CSR


@dataclass
class Plan:
    """Segments of one CSR for one chunk length ``C``, sorted chunks | medium | short.

    Shapes:
        start, end ``[n_seg]`` (edge range, index dtype), dest ``[n_seg]`` int32/int64
        (output row, or partial row for chunks); long_rows ``[n_long]``, part_ptr ``[n_long + 1]``
    """

    C: int
    d_short: int
    start: Tensor
    end: Tensor
    dest: Tensor
    n_chunk: int
    n_medium: int
    n_short: int
    long_rows: Tensor
    part_ptr: Tensor


def build_plan(csr: CSR, C: int, d_short: int) -> Plan:
    """Cut ``csr``'s rows into segments of at most ``C`` edges and order them by class (see module doc)."""
    if d_short > C:  # a short row is a whole row: rows of C < len <= d_short would be counted twice
        raise ValueError(f"short rows ({d_short} edges) cannot be longer than a chunk ({C})")
    rowptr = csr.rowptr.long()
    deg = rowptr[1:] - rowptr[:-1]  # [n_rows]
    order = csr.row_order().long()  # by decreasing degree, ties by row id
    d_sorted = deg[order]
    n_long = int((d_sorted > C).sum())
    n_medium = int((d_sorted > d_short).sum()) - n_long
    long_rows = order[:n_long]
    n_chunks = (deg[long_rows] + C - 1) // C  # [n_long]
    part_ptr = torch.zeros(n_long + 1, dtype=torch.int64, device=csr.device)
    torch.cumsum(n_chunks, 0, out=part_ptr[1:])
    n_chunk = int(part_ptr[-1])
    chunk_row = torch.repeat_interleave(long_rows, n_chunks, output_size=n_chunk)  # [n_chunk]
    k = torch.arange(n_chunk, device=csr.device) - torch.repeat_interleave(part_ptr[:-1], n_chunks,
                                                                          output_size=n_chunk)
    c_start = rowptr[chunk_row] + k * C
    c_end = torch.minimum(c_start + C, rowptr[chunk_row + 1])
    whole = order[n_long:]
    start = torch.cat([c_start, rowptr[whole]])
    end = torch.cat([c_end, rowptr[whole + 1]])
    dest = torch.cat([torch.arange(n_chunk, device=csr.device), whole])
    idx = csr.col.dtype
    return Plan(C, d_short, start.to(idx), end.to(idx), dest.to(idx), n_chunk, n_medium,
                csr.n_rows - n_long - n_medium, long_rows.to(idx), part_ptr.to(idx))


def plan_for(csr: CSR, C: int, d_short: int) -> Plan:
    """The plan of ``csr`` for these lengths, built on first use and kept on the CSR."""
    return csr.cached(("spmm_plan", C, d_short), lambda: build_plan(csr, C, d_short))
