"""A typed graph's relations in each part: one CSR per relation over the part's local ids, and the report.

The partition of a heterogeneous graph is the partition of its union graph (every relation's edges,
symmetrised): one assignment, one renumbering, one halo plan. The union halo holds every source a
relation needs, so a row travels to a peer once however many relations read it there. Each part
adds two arrays (see :func:`relation_arrays`) and META.json a ``hetero`` section (types, their
dataset-id ranges, relations, which types are featured, the target type).

    rel_rowptr  [R, n_owned + 1]   relation r's rows: rel_col[rel_rowptr[r, i] : rel_rowptr[r, i + 1]]
    rel_col     [nnz_rel]          source of each relation edge in local ids (owned, then halo)

both in one index dtype, int32 below 2^31 relation entries and local ids (a rank builds its CSRs on them as stored).

A relation edge ``s -> d`` is an entry of row ``d`` (its destination owns it), so a rank holds every
in-edge of every node it owns: a per-relation mean is exact on its own rows.
"""

from __future__ import annotations

import numpy as np
from gnndist.datasets.schema import HeteroSchema
from gnndist.partition.book import GlobalCSR, PartitionBook, id_dtype, unique_ids


def node_types_of(ids: np.ndarray, offsets) -> np.ndarray:
    """The type index of each dataset id (type ``t`` owns ids ``offsets[t] : offsets[t + 1]``)."""
    return np.searchsorted(np.asarray(offsets), ids, side="right") - 1


class RelationSlicer:
    """The relation edges sorted once by (owner part, relation, destination, source), sliced per part.

    Args:
        schema: the dataset's ``HeteroSchema`` (``rel_src``, ``rel_dst``, ``rel_type``, ``relations``; dataset ids).
        book: the partition's book (owner and new id of every node).
    """

    def __init__(self, schema: HeteroSchema, book: PartitionBook):
        self.num_relations = len(schema.relations)
        self.book = book
        dst = book.old2new[schema.rel_dst]  # [E_rel] new ids
        src = book.old2new[schema.rel_src]
        owner = book.owner_of_new(dst)
        order = np.lexsort((src, dst, schema.rel_type, owner))
        self.src, self.dst, self.rel = src[order], dst[order], schema.rel_type[order]
        self.bounds = np.searchsorted(owner[order], np.arange(book.parts + 1))  # [P + 1]

    def arrays(self, rank: int, halo_gid: np.ndarray) -> dict[str, np.ndarray]:
        """Part ``rank``'s ``rel_rowptr`` ``[R, n_owned + 1]`` and ``rel_col`` ``[nnz_rel]`` (local ids).

        ``halo_gid``: the part's halo (sorted new ids), which holds every off-part source of its relations.
        """
        lo, hi = self.book.offsets[rank], self.book.offsets[rank + 1]
        n_owned = int(hi - lo)
        a, b = self.bounds[rank], self.bounds[rank + 1]
        src, dst, rel = self.src[a:b], self.dst[a:b], self.rel[a:b]
        key = rel * n_owned + (dst - lo)  # ascending: sorted by (relation, row)
        grid = np.arange(self.num_relations)[:, None] * n_owned + np.arange(n_owned + 1)[None, :]
        index = id_dtype(max(len(src), n_owned + len(halo_gid)))  # the kernels' CSR: one dtype for both
        rowptr = np.searchsorted(key, grid).astype(index)  # [R, n_owned + 1]
        inside = (src >= lo) & (src < hi)
        pos = np.searchsorted(halo_gid, src[~inside])
        if len(pos) and (pos.max() >= len(halo_gid) or (halo_gid[pos] != src[~inside]).any()):
            raise AssertionError(f"part {rank}: a relation's source is not in the union graph's halo")
        col = np.empty(len(src), dtype=index)
        col[inside] = src[inside] - lo
        col[~inside] = n_owned + pos
        return {"rel_rowptr": rowptr, "rel_col": col}


def hetero_report(schema: HeteroSchema, book: PartitionBook, csr: GlobalCSR) -> dict:
    """Per-type and per-relation counts of every part and the halo rows of each type (for ``gnndist info``).

    Args:
        csr: the renumbered union graph (its parts' halos are read off it).
    """
    off = book.offsets
    halos = []
    for k in range(book.parts):
        cols = csr.col[csr.rowptr[off[k]] : csr.rowptr[off[k + 1]]]
        halos.append(unique_ids(cols[(cols < off[k]) | (cols >= off[k + 1])], csr.num_nodes))
    offsets = np.asarray(schema.offsets)
    types = node_types_of(book.new2old, offsets)  # [N] type of each new id
    T, P = len(schema.node_types), book.parts
    nodes = [np.bincount(types[book.offsets[k] : book.offsets[k + 1]], minlength=T).tolist() for k in range(P)]
    halo = [np.bincount(types[h], minlength=T).tolist() for h in halos]
    owner = book.assign[schema.rel_dst]
    R = len(schema.relations)
    edges = np.zeros((P, R), dtype=np.int64)
    np.add.at(edges, (owner, schema.rel_type), 1)
    n_all = len(book.assign)
    cross = book.assign[schema.rel_src] != owner  # the source's row travels to the destination's part
    needed = unique_ids((schema.rel_type[cross] * P + owner[cross]) * n_all + schema.rel_src[cross],
                        R * P * n_all)  # distinct (relation, part, source)
    halo_rel = np.bincount(needed // (P * n_all), minlength=R)  # [R]
    per_type = np.asarray(nodes, dtype=float).reshape(P, T)  # [P, T]
    mean = per_type.mean(axis=0)  # [T], every type has nodes
    return {
        "node_types": list(schema.node_types), "relations": [list(r) for r in schema.relations],
        "target": schema.target, "featured": [bool(f) for f in schema.featured],
        "nodes_per_part": nodes,  # [P][T]
        "imbalance_per_type": (per_type.max(axis=0) / mean).tolist(),  # [T]: the heaviest part's nodes / the mean
        "halo_rows_per_part": halo,  # [P][T]: rows received, by the type of the node
        "halo_volume_per_type": np.sum(halo, axis=0).astype(int).tolist() if P else [0] * T,
        "edges_per_part": edges.tolist(),  # [P][R]: relation edges whose destination the part owns
        # [R]: the rows relation r alone would receive (all parts); the union halo sends each row once for all
        "halo_rows_per_relation": halo_rel.astype(int).tolist(),
    }


def format_hetero(h: dict) -> list[str]:
    """The report's lines for a typed graph: nodes and halo rows per type, edges per relation."""
    lines = ["  node types       " + ", ".join(
        f"{t} {sum(p[i] for p in h['nodes_per_part']):,}" + ("" if h["featured"][i] else " (embedding)")
        + (" (target)" if t == h["target"] else "") for i, t in enumerate(h["node_types"]))]
    lines.append("  type imbalance   " + ", ".join(
        f"{t} {v:.3f}" for t, v in zip(h["node_types"], h["imbalance_per_type"])) + " (max/mean nodes per part)")
    lines.append("  halo per type    " + ", ".join(
        f"{t} {v:,}" for t, v in zip(h["node_types"], h["halo_volume_per_type"])) + " rows")
    lines.append("  relations        " + "; ".join(
        f"({s}, {r}, {d}) {sum(p[i] for p in h['edges_per_part']):,}" for i, (s, r, d) in enumerate(h["relations"])))
    lines.append("  halo per rel.    " + "; ".join(
        f"({s}, {r}, {d}) {v:,}" for (s, r, d), v in zip(h["relations"], h["halo_rows_per_relation"]))
        + f" rows: {sum(h['halo_rows_per_relation']):,} alone, {sum(h['halo_volume_per_type']):,} shared")
    for k, (n, e) in enumerate(zip(h["nodes_per_part"], h["edges_per_part"])):
        nodes, halo, edges = ("/".join(map(str, v)) for v in (n, h["halo_rows_per_part"][k], e))
        lines.append(f"  part {k:<11} nodes {nodes}, halo {halo}, relation edges {edges}")
    return lines
