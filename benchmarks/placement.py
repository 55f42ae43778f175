"""The two placements of a 1.5D / 2D grid on hosts of G consecutive ranks, counted on a partition (no processes).

For every replication ``c`` dividing ``P``: the rows the busiest host link carries in one SpMM forward (the larger
of a host's rows in and out, its ranks together), the busiest rank's rows across hosts, and all rows moved, under
the usual placement (rank ``k`` at ``(k // c, k % c)``: a replica group is ``c`` consecutive ranks) and the other
one (rank ``k`` at ``(k % q, k // q)``: a replica group spans the hosts); and whether the other placement of ``c``
moves exactly the rows of the usual placement of ``P / c`` with expand and fold swapped, rank by rank (it does on
the symmetric adjacency: ``tests/test_strategies.py``). Multiply rows by ``F x 4`` bytes for fp32.

    python benchmarks/placement.py /work/c47/cornell5-p16b --ranks-per-host 4
"""

from __future__ import annotations

import argparse

import numpy as np
from gnndist.partition.format import read_meta, read_part


def global_entries(root: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, cols, offsets)``: every stored entry of ``A`` in global (new) ids, and each part's first id."""
    meta = read_meta(root)
    off = np.asarray(meta["offsets"], dtype=np.int64)
    rows, cols = [], []
    for k in range(len(off) - 1):
        part = read_part(root, k, meta)
        rp, col = np.asarray(part["rowptr"], dtype=np.int64), np.asarray(part["col"], dtype=np.int64)
        halo = np.asarray(part["halo_gid"], dtype=np.int64)
        n = len(rp) - 1
        g = col + off[k]
        far = col >= n
        g[far] = halo[col[far] - n]
        rows.append(np.repeat(np.arange(n, dtype=np.int64) + off[k], np.diff(rp)))
        cols.append(g)
    return np.concatenate(rows), np.concatenate(cols), off


def exchange(rows, cols, off, c: int, across: bool) -> tuple[np.ndarray, np.ndarray]:
    """Expand ``[dst, src]`` and fold ``[src, dst]`` rows of replication ``c``, placed usually or ``across``."""
    P = len(off) - 1
    q = P // c
    owner = np.repeat(np.arange(P, dtype=np.int64), np.diff(off))
    a, b = owner[rows], owner[cols]
    blk = (b // q) * q + a % q if across else (a // c) * c + b % c
    out = []
    for ids, peer_of in ((cols, b), (rows, a)):  # expand: distinct (rank, column); fold: distinct (rank, row)
        key = np.unique(blk * (off[-1] + 1) + ids)
        rank, peer = key // (off[-1] + 1), owner[key % (off[-1] + 1)]
        keep = rank != peer
        m = np.zeros((P, P), dtype=np.int64)
        np.add.at(m, (rank[keep], peer[keep]), 1)
        out.append(m)
    return out[0], out[1]


def link_rows(expand, fold, G: int) -> tuple[int, int, int, int]:
    """(busiest host link, busiest rank across hosts, all rows across hosts, all rows) of one SpMM forward."""
    P = len(expand)
    sent = expand.T + fold  # [src, dst] rows
    host = np.arange(P) // G
    far = sent * (host[:, None] != host[None, :])
    hosts = range(P // G)
    link = max(max(far[host == h].sum() for h in hosts), max(far[:, host == h].sum() for h in hosts))
    return int(link), int(max(far.sum(0).max(), far.sum(1).max())), int(far.sum()), int(sent.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("partdir")
    ap.add_argument("--ranks-per-host", type=int, default=4)
    args = ap.parse_args()
    rows, cols, off = global_entries(args.partdir)
    P, G = len(off) - 1, args.ranks_per_host
    print(f"{args.partdir}: {P} ranks, {G} per host; rows per SpMM forward")
    print("| c | placement | busiest host link | busiest rank across hosts | all across hosts | all | = P/c swapped |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for c in [c for c in range(1, P + 1) if P % c == 0]:
        for across in (False, True) if 1 < c < P else (False,):
            ex, fo = exchange(rows, cols, off, c, across)
            same = ""
            if across:
                ex2, fo2 = exchange(rows, cols, off, P // c, False)
                same = "yes" if np.array_equal(ex, fo2) and np.array_equal(fo, ex2) else "no"
            cells = " | ".join(f"{v:,}" for v in link_rows(ex, fo, G))
            print(f"| {c} | {'across hosts' if across else 'usual'} | {cells} | {same} |")


if __name__ == "__main__":
    main()
