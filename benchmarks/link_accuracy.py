"""GAE on Cora: gnndist's link task against a single-process PyG GAE on the same edge splits, and the paper.

Kipf & Welling (2016, https://arxiv.org/abs/1611.07308) report test ROC-AUC 91.0 and AP 92.0 for GAE on Cora,
averaged over random 85 / 5 / 10 edge splits. Seed ``s`` here is ``--split-seed s --seed s``: the split and the
initialisation both change with it. Each row is mean ± std over the seeds of

    gnndist P=1, P=2   gnndist run cora --task link --ranks P --split-seed s --seed s   (the ``gae`` preset: GCN
                       32-16, dot decoder, Adam lr 0.01, 200 epochs, row-normalised features, one uniform
                       negative pair per positive; test scored at the epoch of best validation AUC)
    pyg                torch_geometric.nn.GAE, 2-layer GCNConv encoder 32 -> 16, the same split
                       (gnndist.datasets.edge_split.random_edge_split, as ``gnndist run`` makes it), row-normalised
                       features, Adam lr 0.01, 200 epochs, recon_loss (negative_sampling, one per positive),
                       GAE.test on the split's test positives and negatives

Both are reported at two epochs: ``best-val`` (the epoch of best validation AUC, gnndist's choice; from its
``--log-file``) and ``last`` (epoch 200, the paper's and PyG's example's).

    python benchmarks/link_accuracy.py                          # 10 seeds, gnndist P = 1 and 2, PyG
    python benchmarks/link_accuracy.py --seeds 3 --ranks 1      # quicker
    python benchmarks/link_accuracy.py --quick                  # 2 seeds, P = 1, PyG
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from gnndist.datasets import load
from gnndist.datasets.edge_split import random_edge_split
from torch_geometric.nn import GAE, GCNConv

PAPER = {"auc": 0.910, "ap": 0.920}  # Kipf & Welling 2016, Table 1, GAE on Cora
EPOCHS = 200


def gnndist_run(dataset: str, seed: int, ranks: int, data: str, log: str) -> dict:
    """One ``gnndist run --task link`` (partition cached under ``data``): test AUC / AP at best-val and last epoch."""
    cmd = [sys.executable, "-m", "gnndist.cli", "run", dataset, "--task", "link", "--ranks", str(ranks),
           "--split-seed", str(seed), "--seed", str(seed), "--log-file", log, "--json", "--no-progress"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env={**os.environ, "GNNDIST_DATA": data})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    with open(log) as f:
        epochs = [json.loads(line) for line in f]
    last = epochs[-1]
    return {"best_auc": summary["test_auc"], "best_ap": summary["test_ap"], "best_epoch": summary["best_epoch"],
            "last_auc": last["test_auc"], "last_ap": last["test_ap"], "final_loss": summary["final_loss"],
            "wall_s": time.perf_counter() - t}


class Encoder(torch.nn.Module):
    """PyG's GAE example encoder: GCNConv(F, 32), ReLU, GCNConv(32, 16) (cached normalisation, self-loops, bias)."""

    def __init__(self, f_in: int, hidden: int = 32, out: int = 16):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(f_in, hidden, cached=True), GCNConv(hidden, out, cached=True)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def pyg_run(dataset: str, seed: int) -> dict:
    """PyG's GAE recipe on ``random_edge_split(..., seed)`` of ``dataset``: test AUC / AP at best-val and last epoch."""
    data = load(dataset)
    n = int(data.num_nodes)
    split, message = random_edge_split(data.edge_index, n, (0.85, 0.05, 0.10), seed)
    x = data.x / data.x.sum(1, keepdim=True).clamp(min=1)  # [N, F] row-normalised (T.NormalizeFeatures)
    pos = split.train.t().contiguous()  # [2, E_train], one direction each
    torch.manual_seed(seed)
    model = GAE(Encoder(x.shape[1]))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    best, t = (-1.0, None, None), time.perf_counter()
    for epoch in range(EPOCHS):
        model.train()
        opt.zero_grad()
        z = model.encode(x, message)  # [N, 16]
        loss = model.recon_loss(z, pos)
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            z = model.encode(x, message)
            val = model.test(z, split.valid.t(), split.valid_neg.t())
            test = model.test(z, split.test.t(), split.test_neg.t())
        if val[0] > best[0]:
            best = (val[0], test, epoch)
    return {"best_auc": best[1][0], "best_ap": best[1][1], "best_epoch": best[2], "last_auc": test[0],
            "last_ap": test[1], "final_loss": loss.item(), "wall_s": time.perf_counter() - t}


def mean_std(xs: list[float]) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{100 * statistics.mean(xs):.1f} ± {100 * sd:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="/work/shared/data/cora", help="a Planetoid graph gnndist loads")
    ap.add_argument("--seeds", type=int, default=10, help="seeds 0 .. S-1 (split and initialisation)")
    ap.add_argument("--ranks", default="1,2", help="comma list of gnndist rank counts")
    ap.add_argument("--seeds-multi", type=int, default=None, help="seeds for P > 1 (default: --seeds)")
    ap.add_argument("--no-pyg", action="store_true", help="skip the PyG reference")
    ap.add_argument("--quick", action="store_true", help="2 seeds, 1 rank")
    ap.add_argument("--json", help="also write every run to this JSON file")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.ranks = 2, "1"
    print(f"load average at start: {os.getloadavg()}", flush=True)
    rows: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="gnndist-link-acc-") as data:
        for ranks in (int(r) for r in args.ranks.split(",")):
            seeds = args.seeds if ranks == 1 or args.seeds_multi is None else args.seeds_multi
            for seed in range(seeds):
                r = gnndist_run(args.dataset, seed, ranks, data, os.path.join(data, f"log-{ranks}-{seed}.jsonl"))
                rows.setdefault(f"gnndist P={ranks}", []).append({"seed": seed, **r})
                print(f"gnndist P={ranks} seed {seed}: test AUC {r['best_auc']:.4f} AP {r['best_ap']:.4f} "
                      f"(best epoch {r['best_epoch']}; last AUC {r['last_auc']:.4f} AP {r['last_ap']:.4f}) "
                      f"{r['wall_s']:.0f} s  load {os.getloadavg()[0]:.2f}", flush=True)
        if not args.no_pyg:
            for seed in range(args.seeds):
                r = pyg_run(args.dataset, seed)
                rows.setdefault("pyg", []).append({"seed": seed, **r})
                print(f"pyg         seed {seed}: test AUC {r['best_auc']:.4f} AP {r['best_ap']:.4f} "
                      f"(best epoch {r['best_epoch']}; last AUC {r['last_auc']:.4f} AP {r['last_ap']:.4f}) "
                      f"{r['wall_s']:.0f} s  load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"\nGAE on {args.dataset}, test ROC-AUC / AP (%), mean ± std over seeds (split and initialisation)")
    print("| run | seeds | AUC best-val | AP best-val | AUC last | AP last | final loss | vs paper AUC / AP |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, rs in rows.items():
        col = {k: [r[k] for r in rs] for k in ("best_auc", "best_ap", "last_auc", "last_ap", "final_loss")}
        gap = (f"{100 * (statistics.mean(col['best_auc']) - PAPER['auc']):+.1f} / "
               f"{100 * (statistics.mean(col['best_ap']) - PAPER['ap']):+.1f}")
        print(f"| {name} | {len(rs)} | {mean_std(col['best_auc'])} | {mean_std(col['best_ap'])} | "
              f"{mean_std(col['last_auc'])} | {mean_std(col['last_ap'])} | {statistics.mean(col['final_loss']):.3f} "
              f"| {gap} |")
    print(f"| Kipf & Welling 2016 | - | {100 * PAPER['auc']:.1f} | {100 * PAPER['ap']:.1f} | | | | |")
    print(f"load average at end: {os.getloadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
