"""The sub-partitions a partition may hold beside its parts (``DIR/<name>/``, its META.json's sha256 in the
partition's ``inner``: :func:`~gnndist.partition.format.write_partition`): each one's check, disk bytes and writer,
in :data:`SUB_PARTITIONS`. Read by :meth:`~gnndist.graph.DistGraph.sub_partition`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from gnndist.partition.book import build_local_parts, renumbered_csr, symmetric_csr
from gnndist.partition.components import Arrays
from gnndist.partition.layouts import layout_counts
from gnndist.partition.link import VALEDGES, check_valedges, link_of, valedges_message
from gnndist.partition.progress import stages_of

if TYPE_CHECKING:
    from gnndist.partition.pipeline import Partition


class SubPartition:
    """Another structure over the same owners, stored beside the parts in ``DIR/<name>/`` (its META.json's sha256 in
    the partition's ``inner``): its check, disk bytes and writer. Read by
    :meth:`~gnndist.graph.DistGraph.sub_partition`."""

    name: str = ""

    def check(self, data, dataset: str) -> None:
        """A one-line :class:`~gnndist.errors.UserError` where ``data`` cannot have it."""

    def disk_bytes(self, part: Partition) -> int:
        """What its files take on disk."""
        raise NotImplementedError

    def build(self, part: Partition, dataset: str, progress: bool = True) -> tuple[dict, Iterator[Arrays]]:
        """Its META.json and its parts (a generator)."""
        raise NotImplementedError


class ValEdges(SubPartition):
    """``valedges``: the message graph of training + validation edges (``--use-valedges-as-input``,
    :mod:`~gnndist.partition.link`)."""

    name = VALEDGES

    def check(self, data, dataset):
        check_valedges(data, dataset)

    def disk_bytes(self, part):
        """Its entries, ids, degrees and rowptr: at most 2 E_val entries more than the training graph's."""
        n, nnz = int(part.csr.num_nodes), int(part.csr.nnz)
        return n * (8 + 8 + 4) + (nnz + 2 * int(link_of(part.data).valid.shape[0])) * part.csr.col.dtype.itemsize

    def build(self, part, dataset, progress=True):
        """META.json and the parts (a generator): the partition's book over the message graph of training and
        validation edges, symmetrised and de-duplicated as the training graph is; its parts hold only their
        structure (:data:`STRUCTURE`, :data:`EXCHANGES`)."""
        n, offsets, threads = int(part.csr.num_nodes), part.book.offsets, part.threads
        csr = renumbered_csr(symmetric_csr(valedges_message(part.data), n, threads=threads), part.book,
                             threads=threads)
        counts = layout_counts(csr, offsets, threads=threads)
        meta = {"dataset": dataset, "of": "the message graph of training + validation edges", "parts": part.book.parts,
                "N": n, "E": int(csr.nnz), "F": 0, "classes": 0, "offsets": offsets.tolist(), "layouts": counts.loads}
        parts = ({**lp.arrays(), "layout_pairs": counts.part_pairs(lp.rank)}
                 for lp in build_local_parts(csr, part.book, threads))
        return meta, stages_of(parts, part.book.parts, f"write {self.name} part", progress)


SUB_PARTITIONS: dict[str, SubPartition] = {VALEDGES: ValEdges()}
