"""One rank's share of one distributed SpMM, in rows (:class:`RankLoad`), and its split by host (:func:`on_hosts`).

The counts come from a partition (``gnndist.partition.layouts``), a layout's build (``Strategy``) or
``gnndist simulate``; the model (:mod:`gnndist.cost.times`) turns them into seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np


@dataclass
class RankLoad:
    """One rank's share of one distributed SpMM, in rows (multiply by ``F * b`` for bytes).

    Attributes:
        expand_send, expand_recv: input rows this rank sends to / receives from the ranks
            whose nonzeros need them (the halo exchange).
        fold_send, fold_recv: partial output rows this rank sends to / receives from their
            owners (the sparse reduce-scatter; zero in 1D).
        messages: peers this rank exchanges with, summed over the expand and the fold.
        nnz: nonzeros this rank multiplies.
        rows: output rows this rank owns.
        exchanges: collective calls of one SpMM direction (1 in 1D: the expand; 2 on a grid).
        hosts: the hosts of the job the next four were counted for (:func:`on_hosts`); 1: one host, or counts
            that do not know the hosts (a partition's), and the next four are unused.
        expand_near, fold_near: rows this rank exchanges with ranks of its own host in the expand / the fold
            (the larger of sent and received).
        expand_host, fold_host: rows this rank's host exchanges with other hosts in the expand / the fold, all its
            ranks together over the link they share (the larger of sent and received; the same on each of its ranks).
        messages_far: of ``messages``, the peers on other hosts (counted as ``messages`` is).
    """

    expand_send: int = 0
    expand_recv: int = 0
    fold_send: int = 0
    fold_recv: int = 0
    messages: int = 0
    nnz: int = 0
    rows: int = 0
    exchanges: int = 1
    hosts: int = 1
    expand_near: int = 0
    fold_near: int = 0
    expand_host: int = 0
    fold_host: int = 0
    messages_far: int = 0

    STORED = 8  # the fields a partition stores (META.json ``layouts``): the counts up to ``exchanges``

    def as_array(self) -> np.ndarray:
        return np.array([getattr(self, f.name) for f in fields(self)], dtype=np.int64)

    @classmethod
    def from_array(cls, a) -> RankLoad:
        """The load of :meth:`as_array`'s values, or of their first :attr:`STORED` (a partition's ``layouts``, which
        count one host)."""
        return cls(*(int(v) for v in a))

    def bytes(self, width: int, elem: int = 4) -> dict[str, int]:
        """Bytes of one forward and one backward SpMM: ``fwd_sent``, ``fwd_received``, ``bwd_sent``, ``bwd_received``.

        The backward runs both exchanges in reverse, so it sends what the forward received.
        """
        sent = (self.expand_send + self.fold_send) * width * elem
        recv = (self.expand_recv + self.fold_recv) * width * elem
        return {"fwd_sent": sent, "fwd_received": recv, "bwd_sent": recv, "bwd_received": sent}


def host_index(hosts) -> np.ndarray:
    """``[P]`` every rank's host (any labels, one per rank) as the index of the host's first rank."""
    first: dict = {}
    return np.array([first.setdefault(h, k) for k, h in enumerate(hosts)], dtype=np.int64)


def on_hosts(loads: list[RankLoad], expand: np.ndarray, fold: np.ndarray, host_of) -> list[RankLoad]:
    """``loads`` (one per rank) with each exchange split by host: the rows a rank exchanges with the ranks of
    its host, and the rows its host exchanges with the others (:class:`RankLoad`'s ``*_near``, ``*_host``).

    Args:
        loads: every rank's load of one layout.
        expand: ``[P, P]`` rows rank ``dst`` receives from rank ``src`` in the expand, ``[dst, src]``.
        fold: ``[P, P]`` partial rows rank ``src`` sends to rank ``dst`` in the fold, ``[src, dst]`` (zeros in 1D).
        host_of: ``[P]`` the host (any label) of every rank.
    """
    host = host_index(host_of)
    same = host[:, None] == host[None, :]  # [P, P]

    def split(m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows within the host, the host's rows across hosts, and the peers on other hosts (counted as
        ``RankLoad.messages`` is: the larger of the send and receive peers), per rank."""
        m = np.asarray(m, dtype=np.int64)
        near, far = np.where(same, m, 0), np.where(same, 0, m)
        per_host = lambda v: np.bincount(host, weights=v, minlength=len(host))[host]  # noqa: E731
        return (np.maximum(near.sum(0), near.sum(1)),
                np.maximum(per_host(far.sum(0)), per_host(far.sum(1))).astype(np.int64),
                np.maximum(np.count_nonzero(far, axis=0), np.count_nonzero(far, axis=1)))

    (e_near, e_host, e_far), (f_near, f_host, f_far) = split(expand), split(fold)
    far = e_far + f_far
    hosts = len(np.unique(host))
    return [replace(ld, hosts=hosts, expand_near=int(e_near[k]), fold_near=int(f_near[k]),
                    expand_host=int(e_host[k]), fold_host=int(f_host[k]), messages_far=int(far[k]))
            for k, ld in enumerate(loads)]
