"""OGB's ogbl-collab GCN recipe: a one-process PyG run against ``gnndist run ogbl-collab`` on the same files.

The data is an ogbl-collab-layout copy of any graph (``benchmarks/ogbl_layout.py``: Coauthor CS by default, its
edges split 85 / 5 / 10, as many shared negatives as positives in valid and test, Hits@50 by OGB's Evaluator).
Every run trains the same number of epochs and evaluates after each; each row reports the test Hits@50 at the epoch
of best validation Hits@50 and the training seconds until validation Hits@50 first reaches a common target
(evaluation excluded on both sides: gnndist's ``--log-file`` ``time_s`` is the epoch's training steps).

    pyg              OGB's examples/linkproppred/collab/gnn.py, one process (torch's threads): GCNConv x3 of 256
                     (cached normalisation, the layout's unit edge weights), LinkPredictor (Hadamard product,
                     3 linear layers), dropout 0, Adam lr 0.001, shuffled batches of 64 * 1024 positives with one
                     encoder pass each, one torch.randint negative pair per positive, -log(sigmoid) losses,
                     clip_grad_norm_(1.0) on the encoder and on the predictor (--no-clip: none, as gnndist)
    gnndist          gnndist run ogbl-collab --root DIR --ranks P --epochs E   (the ``ogbl_collab`` preset:
                     the same model and optimiser, --edge-batch 65536, hashed negatives, no clipping)
    gnndist-ebN      the same with --edge-batch N (0: one encoder pass and one step per epoch)

    python benchmarks/ogbl_layout.py --dataset coauthor_cs --root /work/shared/data --out /tmp/ogbl_cs
    python benchmarks/link_reference.py --root /tmp/ogbl_cs --epochs 100 --ranks 2
    python benchmarks/link_reference.py --root /tmp/ogbl_cs --quick          # 10 epochs
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from gnndist.datasets.graph import pyg_safe_globals
from ogb.linkproppred import Evaluator, PygLinkPropPredDataset
from torch_geometric.nn import GCNConv

NAME = "ogbl-collab"
BATCH = 64 * 1024  # OGB's --batch_size


class GCN(torch.nn.Module):
    """OGB collab's GCN: ``layers`` GCNConv (cached) with ReLU and dropout between them."""

    def __init__(self, f_in: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        widths = [f_in] + [hidden] * layers
        self.convs = torch.nn.ModuleList(GCNConv(a, b, cached=True) for a, b in zip(widths[:-1], widths[1:]))
        self.dropout = dropout

    def forward(self, x, edge_index, edge_weight):
        for conv in self.convs[:-1]:
            x = F.dropout(conv(x, edge_index, edge_weight).relu(), self.dropout, self.training)
        return self.convs[-1](x, edge_index, edge_weight)  # [N, hidden]


class LinkPredictor(torch.nn.Module):
    """OGB's LinkPredictor: ``sigmoid(MLP(h_u * h_v))``, ``layers`` linear layers."""

    def __init__(self, hidden: int, layers: int, dropout: float):
        super().__init__()
        widths = [hidden] * layers + [1]
        self.lins = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.dropout = dropout

    def forward(self, hu, hv):
        x = hu * hv
        for lin in self.lins[:-1]:
            x = F.dropout(lin(x).relu(), self.dropout, self.training)
        return torch.sigmoid(self.lins[-1](x))  # [n, 1]


def pyg_run(root: str, epochs: int, seed: int, clip: bool, hidden: int = 256, layers: int = 3) -> list[dict]:
    """OGB's collab gnn.py on ``root``'s files, one run: a row per epoch (hits@50, training seconds)."""
    with contextlib.redirect_stdout(io.StringIO()), pyg_safe_globals():
        ds = PygLinkPropPredDataset(NAME, root=root)
        data, split = ds[0], ds.get_edge_split()
    ei, ew = data.edge_index, data.edge_weight.view(-1).float()  # [2, E] both directions, [E]
    torch.manual_seed(seed)
    model, predictor = GCN(data.num_features, hidden, layers, 0.0), LinkPredictor(hidden, layers, 0.0)
    opt = torch.optim.Adam([*model.parameters(), *predictor.parameters()], lr=0.001)
    evaluator = Evaluator(NAME)
    pos_train = split["train"]["edge"]  # [E_train, 2]
    rows = []
    for epoch in range(epochs):
        t = time.perf_counter()
        model.train(), predictor.train()
        total = count = 0
        for perm in torch.randperm(pos_train.size(0)).split(BATCH):
            opt.zero_grad()
            h = model(data.x, ei, ew)  # [N, hidden]
            edge = pos_train[perm].t()
            pos_loss = -torch.log(predictor(h[edge[0]], h[edge[1]]) + 1e-15).mean()
            edge = torch.randint(0, data.num_nodes, edge.size(), dtype=torch.long)
            neg_loss = -torch.log(1 - predictor(h[edge[0]], h[edge[1]]) + 1e-15).mean()
            loss = pos_loss + neg_loss
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                torch.nn.utils.clip_grad_norm_(predictor.parameters(), 1.0)
            opt.step()
            total, count = total + loss.item() * perm.numel(), count + perm.numel()
        train_s = time.perf_counter() - t
        rows.append({"epoch": epoch, "loss": total / count, **pyg_evaluate(model, predictor, data, ew, split,
                                                                          evaluator), "time_s": train_s,
                     "eval_s": time.perf_counter() - t - train_s})
    return rows


@torch.no_grad()
def pyg_evaluate(model, predictor, data, ew, split, evaluator) -> dict[str, float]:
    """OGB's test(): Hits@50 of train (all training positives) / valid / test against valid / valid / test negatives."""
    model.eval(), predictor.eval()
    h = model(data.x, data.edge_index, ew)

    def score(edge):
        return torch.cat([predictor(h[e[:, 0]], h[e[:, 1]]).view(-1) for e in edge.split(BATCH)])

    neg_val = score(split["valid"]["edge_neg"])
    pairs = {"train": (split["train"]["edge"], neg_val), "val": (split["valid"]["edge"], neg_val),
             "test": (split["test"]["edge"], score(split["test"]["edge_neg"]))}
    evaluator.K = 50
    return {f"{k}_hits@50": evaluator.eval({"y_pred_pos": score(pos), "y_pred_neg": neg})["hits@50"]
            for k, (pos, neg) in pairs.items()}


def gnndist_run(root: str, epochs: int, ranks: int, seed: int, edge_batch: int | None, data: str,
                log: str, extra: tuple[str, ...] = ()) -> list[dict]:
    """``gnndist run ogbl-collab --root ROOT`` (``extra``: more flags); the rows of its ``--log-file``."""
    cmd = [sys.executable, "-m", "gnndist.cli", "run", NAME, "--root", root, "--ranks", str(ranks), "--epochs",
           str(epochs), "--seed", str(seed), "--log-file", log, "--json", "--no-progress", *extra]
    if edge_batch is not None:
        cmd += ["--edge-batch", str(edge_batch)]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env={**os.environ, "GNNDIST_DATA": data})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    with open(log) as f:
        return [json.loads(line) for line in f]


def best(rows: list[dict]) -> dict:
    """The row of the first maximum of validation Hits@50 (gnndist's model selection)."""
    return max(rows, key=lambda r: (r["val_hits@50"], -r["epoch"]))


def time_to(rows: list[dict], target: float) -> tuple[int, float] | None:
    """(epoch, training seconds up to and including it) where validation Hits@50 first reaches ``target``."""
    spent = 0.0
    for r in rows:
        spent += r["time_s"]
        if r["val_hits@50"] >= target:
            return r["epoch"], spent
    return None


def common_args(ap: argparse.ArgumentParser, epochs: int) -> None:
    """``--root``, ``--epochs``, ``--ranks``: what every side-by-side run on a collab-layout copy reads."""
    ap.add_argument("--root", required=True, help="the folder holding ogbl_collab/ (benchmarks/ogbl_layout.py --out)")
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument("--ranks", type=int, default=2, help="gnndist's ranks")


def print_table(runs: dict[str, list[dict]], loads: dict[str, tuple[float, float]], target: float,
                ranks: int) -> None:
    """One markdown row per run: best validation Hits@50, its epoch and test Hits@50, s/epoch, time to ``target``."""
    print("| run | ranks | best val Hits@50 | epoch | test Hits@50 | s/epoch (train) | epoch at target | "
          "s to target | load |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for name, rows in runs.items():
        b, hit = best(rows), time_to(rows, target)
        steady = [r["time_s"] for r in rows[1:]] or [rows[0]["time_s"]]
        at, secs = (str(hit[0]), f"{hit[1]:.1f}") if hit else ("-", "not reached")
        print(f"| {name} | {'1 process' if name.startswith('pyg') else ranks} | {100 * b['val_hits@50']:.2f} | "
              f"{b['epoch']} | {100 * b['test_hits@50']:.2f} | {sum(steady) / len(steady):.3f} | {at} | {secs} | "
              f"{loads[name][0]:.2f}-{loads[name][1]:.2f} |")
    print(f"load average at end: {os.getloadavg()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(ap, epochs=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default="pyg,gnndist,gnndist-eb0", help="comma list of pyg, pyg-noclip, gnndist, "
                    "gnndist-ebN (--edge-batch N)")
    ap.add_argument("--target", type=float, default=None,
                    help="validation Hits@50 to time (default: 0.95 x the lowest best validation Hits@50 of the runs)")
    ap.add_argument("--quick", action="store_true", help="10 epochs")
    ap.add_argument("--json", help="also write every run's per-epoch rows to this JSON file")
    args = ap.parse_args()
    if args.quick:
        args.epochs = 10
    print(f"load average at start: {os.getloadavg()}; torch threads {torch.get_num_threads()}", flush=True)
    runs: dict[str, list[dict]] = {}
    loads: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="gnndist-link-ref-") as data:
        for name in args.runs.split(","):
            before, t = os.getloadavg()[0], time.perf_counter()
            if name.startswith("pyg"):
                rows = pyg_run(args.root, args.epochs, args.seed, clip=name == "pyg")
            else:
                batch = int(name.split("-eb", 1)[1]) if "-eb" in name else None  # gnndist-ebN: --edge-batch N
                rows = gnndist_run(args.root, args.epochs, args.ranks, args.seed, batch, data,
                                   os.path.join(data, f"{name}.jsonl"))
            runs[name], loads[name] = rows, (before, os.getloadavg()[0])
            b = best(rows)
            print(f"{name:12s} best val {b['val_hits@50']:.4f} at epoch {b['epoch']}: test {b['test_hits@50']:.4f}; "
                  f"{sum(r['time_s'] for r in rows):.1f} s training, {time.perf_counter() - t:.0f} s wall; "
                  f"load {loads[name][0]:.2f} -> {loads[name][1]:.2f}", flush=True)
    target = args.target or 0.95 * min(best(rows)["val_hits@50"] for rows in runs.values())
    print(f"\n{NAME} layout at {args.root}, {args.epochs} epochs, seed {args.seed}; target validation Hits@50 "
          f"{100 * target:.2f} %")
    print_table(runs, loads, target, args.ranks)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": target, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
