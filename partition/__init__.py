"""METIS partitioning, renumbering, halo plans and the on-disk partition format.

    part = partition(data, parts=4)             # METIS(vol), balance chosen by modelled epoch time, refined
    part.save("out/cora-4", dataset="cora")     # DIR/META.json + DIR/part-K/*.npy
    arrays, meta = load("out/cora-4", rank=1)   # one rank reads only its own part

The pipeline (:mod:`~gnndist.partition.pipeline`: stages over one request), the choice of backend and
balance (:mod:`~gnndist.partition.choose`) and the report (:mod:`~gnndist.partition.report`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gnndist.partition.balance import rank_loads
from gnndist.partition.book import (
    GlobalCSR,
    LocalPart,
    PartitionBook,
    build_local_parts,
    comm_volume,
    csr_from_edge_index,
)
from gnndist.partition.format import FORMAT_VERSION, read_meta, read_part
from gnndist.partition.layouts import replications
from gnndist.partition.metis import metis_assign, random_assign
from gnndist.partition.pipeline import METHODS, STAGES, Partition, check_budget, model_widths_of, partition
from gnndist.partition.plan import AUTO_BUDGET
from gnndist.partition.report import REPORT_VERSION, format_report

__all__ = [
    "AUTO_BUDGET", "FORMAT_VERSION", "GlobalCSR", "LocalPart", "METHODS", "Partition", "PartitionBook",
    "REPORT_VERSION", "STAGES", "build_local_parts", "check_budget", "comm_volume", "csr_from_edge_index",
    "format_report", "load", "metis_assign", "model_widths_of", "partition", "random_assign", "rank_loads",
    "read_meta", "read_part", "replications",
]


def load(root: str | Path, rank: int) -> tuple[dict[str, np.ndarray], dict]:
    """Read part ``rank`` of a saved partition (checksums verified) and its metadata."""
    meta = read_meta(root)
    return read_part(root, rank, meta), meta
