"""An ogbl-collab-layout copy of a graph: link-prediction data in OGB's own files, from any graph we can load.

Features are projected to ``--features`` dims by a seeded Gaussian random projection (entries N(0, 1/k)); the
undirected edges are split at random (``--edge-split``, seeded; valid and test get as many negatives as positives,
shared pairs as collab's); every training edge's year and weight is 1. The copy loads as ``ogbl-collab`` with
``--root OUT`` (metric hits@50), so link prediction runs on a shared graph without OGB's download.

    python benchmarks/ogbl_layout.py --dataset coauthor_cs --root /work/shared/data --out /tmp/ogbl_cs
"""

import argparse
import os.path as osp
import time

import numpy as np
import torch
from gnndist.datasets import load
from gnndist.datasets.edge_split import parse_edge_split, random_edge_split
from gnndist.datasets.ogbl import write_ogbl
from torch_geometric.data import Data


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True, help="a registered name or a folder under --root (coauthor_cs)")
    p.add_argument("--root", default=None, help="where the datasets live")
    p.add_argument("--out", required=True, help="root of the copy: it is written to OUT/ogbl_collab")
    p.add_argument("--features", type=int, default=128, help="feature dims after the random projection")
    p.add_argument("--edge-split", default="85,5,10", help="train,valid,test percentages or fractions")
    p.add_argument("--seed", type=int, default=0, help="seed of the projection and of the split")
    a = p.parse_args(argv)

    t = time.perf_counter()
    path = osp.join(a.root, a.dataset) if a.root else a.dataset
    data = load(path) if osp.exists(path) else load(a.dataset, root=a.root)
    n, f_in = data.x.shape
    rng = np.random.default_rng(a.seed)
    proj = torch.from_numpy(rng.standard_normal((f_in, a.features)) / np.sqrt(a.features)).to(torch.float32)
    x = data.x @ proj  # [N, features]
    split, message = random_edge_split(data.edge_index, n, parse_edge_split(a.edge_split), seed=a.seed)
    folder = write_ogbl(Data(x=x, edge_index=message, num_nodes=n), a.out, "ogbl-collab", split=split)
    print(f"{folder}: {data.name}, {n:,} nodes, features {f_in} -> {a.features} (Gaussian projection, seed {a.seed})")
    for k, v in split.arrays().items():
        print(f"  {k:12s} {list(v.shape)}")
    print(f"  message graph {message.size(1):,} directed edges; year = weight = 1; {time.perf_counter() - t:.1f} s")
    print(f"  load with: gnndist.datasets.ogbl.load_ogbl('ogbl-collab', root='{a.out}')")


if __name__ == "__main__":
    main()
