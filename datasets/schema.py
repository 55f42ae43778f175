"""The schema of a typed graph, :class:`HeteroSchema`: one form before partitioning and after.

A dataset's union graph carries it as ``data.hetero`` (with its relation edges, in dataset ids); a partition
stores it in META.json's ``hetero`` section (:meth:`HeteroSchema.to_meta`, the edges stay in the parts) and a
rank's graph reads it back once (:meth:`HeteroSchema.from_meta`) as ``graph.hetero``. Checkpoints and exported
files hold the META form, converted at their edges; code reads the attributes, never the keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Relation = tuple[str, str, str]  # (source type, relation, destination type)


@dataclass(frozen=True, eq=False)
class HeteroSchema:
    """The types and relations of a union graph (dataset ids: type ``t`` owns ``offsets[t] : offsets[t + 1]``).

    Args:
        node_types: the types, in the order of their id ranges.
        offsets: where each type's ids start, and the end (``[T + 1]``).
        relations: ``(src, rel, dst)`` per relation (reverse relations included).
        featured: per type, whether it has features (the others learn an embedding or stay zero).
        target: the labelled type (loss, metric, ``predict``).
        relation_edges: the edges of each relation (``[R]``).
        rel_src, rel_dst, rel_type: every relation edge (dataset ids, relation index); ``None`` when read from a
            partition, whose parts hold the edges.

    Shapes:
        rel_src, rel_dst, rel_type ``[E_rel]`` int64
    """

    node_types: list[str]
    offsets: tuple[int, ...]
    relations: list[Relation]
    featured: list[bool]
    target: str
    relation_edges: list[int]
    rel_src: np.ndarray | None = None
    rel_dst: np.ndarray | None = None
    rel_type: np.ndarray | None = None

    @classmethod
    def from_meta(cls, meta: dict) -> HeteroSchema:
        """The schema of META.json's ``hetero`` section (or a checkpoint's ``hetero`` entry, the same form)."""
        return cls(list(meta["node_types"]), tuple(int(o) for o in meta["offsets"]),
                   [tuple(r) for r in meta["relations"]], [bool(f) for f in meta["featured"]], meta["target"],
                   [int(e) for e in meta["relation_edges"]])

    def to_meta(self) -> dict:
        """The JSON form stored in a partition's META.json and in checkpoints (the edges stay in the parts)."""
        return {"node_types": list(self.node_types), "offsets": [int(o) for o in self.offsets],
                "relations": [list(r) for r in self.relations], "featured": [bool(f) for f in self.featured],
                "target": self.target, "relation_edges": [int(e) for e in self.relation_edges]}

    def counts(self) -> list[int]:
        """The nodes of each type (``[T]``)."""
        return [b - a for a, b in zip(self.offsets[:-1], self.offsets[1:])]


def schema_of(data) -> HeteroSchema | None:
    """A dataset's typed-graph schema, ``data.hetero``; ``None`` for a graph of one node type (no attribute)."""
    return getattr(data, "hetero", None)
