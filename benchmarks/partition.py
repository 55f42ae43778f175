"""Partition quality (METIS vs random communication volume) and partitioning time / peak memory at scale.

    python benchmarks/partition.py quality                 # Cora, Amazon Photo, Coauthor CS at 4 and 8 parts
    python benchmarks/partition.py scale --graph synthetic-2m --parts 8   # time + peak RSS, end to end
    python benchmarks/partition.py --balance-table         # plain METIS vs the old default vs --balance auto
    python benchmarks/partition.py settings                # which of auto's METIS settings wins, 9 more graphs
    python benchmarks/partition.py backends                # each backend's time and volume vs METIS vol, 8 graphs
    python benchmarks/partition.py refine --graph /tmp/s2m --parts 64 --counts sparse   # the refinement alone
    gnndist synth synthetic-8m-d50 --out /tmp/s8m --feature-dim 128
    python benchmarks/partition.py scale --graph /tmp/s8m --parts 64   # time, peak RSS, bytes per entry

Peak RSS is the process high-water mark (``ru_maxrss``), so run ``scale`` in its own process.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time

from gnndist.datasets import load
from gnndist.partition import model_widths_of, partition
from gnndist.partition.plan import AUTO_BUDGET

from gnndist.cost import NETWORKS, RankLoad, epoch_time


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB


def quality(args: argparse.Namespace) -> None:
    print(f"{'dataset':<14}{'parts':>6}{'metis(vol)':>12}{'metis(cut)':>12}{'random':>10}{'vol/random':>12}"
          f"{'cut/random':>12}{'imb nodes':>10}{'imb train':>10}")
    for name in args.datasets.split(","):
        data = load(name, root=args.root)
        for parts in (int(p) for p in args.parts.split(",")):
            vol = partition(data, parts, "metis", objective="vol").report
            cut = partition(data, parts, "metis", objective="cut").report
            rnd = vol["random_comm_volume"]
            print(f"{name:<14}{parts:>6}{vol['comm_volume']:>12,}{cut['comm_volume']:>12,}{rnd:>10,}"
                  f"{vol['comm_volume'] / rnd:>12.3f}{cut['comm_volume'] / rnd:>12.3f}"
                  f"{vol['imbalance']['nodes']:>10.3f}{vol['imbalance']['train']:>10.3f}")


def _floor(report: dict, net) -> float:
    """Modelled epoch time of ``report``'s partition made ideal in all but its peers: rows and nonzeros
    spread evenly, no halo rows, every rank keeping its peers (what is left to gain without dropping peers)."""
    n, nnz, parts = report["num_nodes"], 2 * report["num_edges"], report["parts"]
    loads = [RankLoad(rows=-(-n // parts), nnz=-(-nnz // parts), messages=m) for m in report["peers_per_part"]]
    return epoch_time(loads, tuple(report["cost_model"]["widths"]), net)


def balance_table(args: argparse.Namespace) -> None:
    """Plain METIS (nodes), the old default (nodes,edges,train) and auto + refinement: one markdown table."""
    print(f"cost model: network {args.network}, GCN widths (F, {', '.join([str(args.hidden)] * (args.layers - 1))}"
          f"{', ' if args.layers > 1 else ''}classes)\n")
    print("| dataset | P | setting | volume | max send / mean | edge imbalance | modelled epoch ms | chosen |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    aims = []
    net = NETWORKS[args.network]
    for name in args.datasets.split(","):
        data = load(name, root=args.root)
        label = getattr(data, "name", None) or name
        for parts in (int(p) for p in args.parts.split(",")):
            t0 = time.perf_counter()
            kw = {"progress": False, "cost_network": args.network,
                  "widths": model_widths_of(data, args.hidden, args.layers)}
            runs = {
                "plain METIS (nodes)": partition(data, parts, "metis", balance="nodes", refine=False, **kw).report,
                "old default (nodes,edges,train)": partition(data, parts, "metis", balance="nodes,edges,train",
                                                             refine=False, **kw).report,
                "auto + refinement": partition(data, parts, "metis", **kw).report,
                "auto, every backend": partition(data, parts, **kw).report,
            }
            for setting, r in runs.items():
                chosen = f"{r['backend']} {r['auto']['chosen']}" if "auto" in r else ""
                print(f"| {label} | {parts} | {setting} | {r['comm_volume']:,} | {r['max_send_over_mean']:.3f} | "
                      f"{r['imbalance']['edges']:.3f} | {r['modelled_epoch_s'] * 1e3:.4f} | {chosen} |", flush=True)
            plain, old, _, auto = runs.values()
            best = min(plain["modelled_epoch_s"], old["modelled_epoch_s"])
            aims.append((label, parts, auto["modelled_epoch_s"] / best, _floor(auto, net) / best,
                         max(auto["peers_per_part"]), max(plain["peers_per_part"]), auto["max_send_over_mean"],
                         auto["comm_volume"] / plain["comm_volume"], time.perf_counter() - t0))
    print("\naims: time <= 0.9 x the better METIS setting, max send <= 1.2 x mean, volume <= 1.1 x plain METIS")
    print("floor: auto's partition with even rows and nonzeros and no halo rows, its peers kept (see _floor)\n")
    print("| dataset | P | auto time / better METIS | floor / better METIS | max peers auto (plain) | "
          "max send / mean | volume / plain METIS | seconds (3 runs) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, parts, t, floor, pk, pk0, s, v, secs in aims:
        print(f"| {label} | {parts} | {t:.3f} | {floor:.3f} | {pk} ({pk0}) | {s:.3f} | {v:.3f} | {secs:.1f} |")


def _stage_memory() -> None:
    """Append the process's peak and current RSS to every progress line (one per stage that took >= 2 s)."""
    from gnndist.partition import progress

    def end(self, _end=progress.Stages._end):
        if self.name is not None and self.enabled and not self.tty:
            with open("/proc/self/statm") as f:
                now = int(f.read().split()[1]) * resource.getpagesize() / 2**30
            self.name += f" (peak RSS so far {_rss_gb():.2f} GiB, now {now:.2f} GiB)"
        _end(self)

    progress.Stages._end = end


def scale(args: argparse.Namespace) -> None:
    """End to end in this process: load (a name or a .npy folder), partition, save; time, peak RSS, per entry.
    Each stage's progress line (stderr) carries the peak RSS reached by its end and the RSS then."""
    _stage_memory()
    t0 = time.perf_counter()
    data = load(args.graph)
    t1 = time.perf_counter()
    print(f"load {args.graph}: {data.num_nodes:,} nodes, {data.edge_index.shape[1]:,} stored edges, F = "
          f"{data.x.shape[1]}, {t1 - t0:.1f} s, peak RSS {_rss_gb():.2f} GiB", flush=True)
    p = partition(data, args.parts, method=args.method, objective=args.objective,
                  balance=tuple(b for b in args.balance.split(",") if b), refine=args.refine, threads=args.threads,
                  auto_budget=args.auto_budget)
    t2 = time.perf_counter()
    r = p.report
    nnz = 2 * r["num_edges"]
    print(f"partition {args.method} -> {r['backend']} ({r['library']}, balance {args.balance}) into {args.parts}: "
          f"{t2 - t1:.1f} s (assignment {r['assign_seconds']:.1f} s), comm volume {r['comm_volume']:,} "
          f"(random {r['random_comm_volume']:,}, ratio {r['vs_random']:.3f}), edge cut {r['edge_cut']:,}, "
          f"max send / mean {r['max_send_over_mean']:.3f}, node imbalance {r['imbalance']['nodes']:.3f}, "
          f"modelled epoch {r['modelled_epoch_s'] * 1e3:.3f} ms, peak RSS {_rss_gb():.2f} GiB", flush=True)
    print(json.dumps({k: r.get(k) for k in ("objective", "balance", "tolerances", "refine", "auto",
                                            "metis_sampled_entries", "skipped")}), flush=True)
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        p.save(f"{d}/parts", dataset=args.graph)
        t3 = time.perf_counter()
        part_x = max(r["nodes_per_part"]) * data.x.shape[1] * 4
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(f"save: {t3 - t2:.1f} s; total {t3 - t0:.1f} s; peak RSS {_rss_gb():.2f} GiB; {nnz:,} adjacency "
              f"entries: {peak / nnz:.1f} bytes per entry ({(peak - part_x) / nnz:.1f} less one part's features), "
              f"{(t3 - t1) / nnz * 1e6:.3f} us per entry partition + save", flush=True)


BACKEND_GRAPHS = ",".join(["cora", "amazon-photo", "coauthor-cs", "/work/shared/data/fb100_cornell5/Cornell5.mat"] + [
    "/work/shared/data/" + f for f in ("snap_ca_astroph/astro-ph-cc1.jlg", "snap_ca_condmat/ca-condmat-cc1.jlg",
                                       "snap_email_enron/email-enron.jlg",
                                       "snap_facebook_combined/facebook-combined.jlg")])


def backends(args: argparse.Namespace) -> None:
    """Every backend alone (balance nodes:1.03, no refinement) and the default (auto + refinement): seconds,
    volume, volume over METIS ``vol``'s and node imbalance, one markdown row per graph, P and backend."""
    print("| graph (adjacency entries) | P | partitioner | seconds | volume | / METIS vol | node imbalance |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for path in args.datasets.split(","):
        data = load(path, root=args.root)
        name = getattr(data, "name", None) or path.rsplit("/", 1)[-1]
        for P in (int(x) for x in args.parts.split(",")):
            runs = [(f"metis {o}", "metis", o, "nodes", False) for o in ("vol", "cut")]
            runs += [(b, b, "vol", "nodes", False) for b in args.backends.split(",") if b not in ("metis", "")]
            runs.append(("default (auto + refinement)", "auto", "vol", "auto", True))
            base = None
            for label, method, obj, bal, ref in runs:
                t0 = time.perf_counter()
                r = partition(data, P, method, obj, 0, bal, progress=False, refine=ref, threads=args.threads,
                              auto_budget=args.auto_budget).report
                secs = time.perf_counter() - t0
                base = base or r["comm_volume"]
                if method == "auto":
                    label += (f": {r['backend']} {r['auto']['chosen']}, {len(r['auto']['candidates'])} of "
                              f"{len(r['auto']['candidates']) + len(r['auto']['budget']['skipped'])} candidates")
                print(f"| {name} ({2 * r['num_edges']:,}) | {P} | {label} | {secs:.1f} | {r['comm_volume']:,} | "
                      f"{r['comm_volume'] / base:.3f} | {r['imbalance']['nodes']:.3f} |", flush=True)


def refine_counts(args: argparse.Namespace) -> None:
    """The refinement alone with dense or sparse neighbour-part counts (``--counts``), after ``--start`` (nodes:1.03):
    seconds of each stage, peak RSS and a hash of the refined assignment (the same for both). Run each
    ``--counts`` in its own process: the peak is the process's."""
    import hashlib

    import numpy as np
    from gnndist.partition.backends import BACKENDS, Request
    from gnndist.partition.book import symmetric_csr
    from gnndist.partition.counts import part_counts
    from gnndist.partition.refine import RefineSettings, refine

    from gnndist.cost import NETWORKS

    t0 = time.perf_counter()
    data = load(args.graph, root=args.root)
    csr = symmetric_csr(data.edge_index, data.num_nodes)
    widths, net = model_widths_of(data), NETWORKS["ib"]
    del data
    t1 = time.perf_counter()
    start = BACKENDS[args.start].assign(csr, Request(args.parts))
    t2 = time.perf_counter()
    print(f"{csr.num_nodes:,} nodes, {csr.nnz:,} entries, P = {args.parts}: load + CSR {t1 - t0:.1f} s, {args.start} "
          f"{t2 - t1:.1f} s, peak RSS {_rss_gb():.2f} GiB", flush=True)
    sparse = args.counts == "sparse"
    cells = part_counts(csr, start, args.parts, sparse)
    held = getattr(cells, "cells", csr.num_nodes * args.parts)
    print(f"counts {args.counts}: {held:,} cells ({held / csr.num_nodes:.2f} per node), "
          f"{time.perf_counter() - t2:.1f} s to count", flush=True)
    del cells
    passes = int(np.clip((1 << 27) // max(csr.nnz, 1), 2, 16))
    t3 = time.perf_counter()
    out, stats = refine(csr, start, args.parts, np.ones((csr.num_nodes, 1), dtype=np.int64), np.array([1.03]),
                        RefineSettings(widths, net, passes=passes, sparse=sparse))
    t4 = time.perf_counter()
    print(f"refine ({args.counts} counts, {passes} passes): {t4 - t3:.1f} s, moved {stats['moved']:,} + "
          f"{stats['peers']['moved']:,} (pruning, {stats['peers']['tries']} tries), volume "
          f"{stats['comm_volume_before']:,} -> {stats['comm_volume_after']:,}, peak RSS {_rss_gb():.2f} GiB, "
          f"assignment sha256 {hashlib.sha256(out.astype(np.int64).tobytes()).hexdigest()[:16]}", flush=True)


SETTINGS_GRAPHS = ",".join("/work/shared/data/" + f for f in (
    "snap_ca_astroph/astro-ph-cc1.jlg", "snap_ca_condmat/ca-condmat-cc1.jlg", "blogcatalog/blogcatalog.npz",
    "snap_email_enron/email-enron.jlg", "dblp/dblp.npz", "squirrel/squirrel.npz", "chameleon/chameleon.npz",
    "actor/actor.npz", "flickr_ane/flickr.npz"))


def settings(args: argparse.Namespace) -> None:
    """Which of ``--balance auto``'s METIS settings wins where: every candidate's modelled epoch time
    (after refinement) over the chosen one, per graph and P; the chosen one's max peers and node imbalance."""
    wins: dict[str, int] = {}
    for path in args.datasets.split(","):
        data = load(path, root=args.root)
        name = getattr(data, "name", None) or path.rsplit("/", 1)[-1]
        for P in (int(x) for x in args.parts.split(",")):
            t0 = time.perf_counter()
            r = partition(data, P, "metis", "vol", 0, "auto", progress=False, cost_network=args.network,
                          widths=model_widths_of(data, args.hidden, args.layers)).report
            cands = {c["balance"]: c["modelled_epoch_s"] for c in r["auto"]["candidates"]}
            best = cands[r["auto"]["chosen"]]
            wins[r["auto"]["chosen"]] = wins.get(r["auto"]["chosen"], 0) + 1
            print(f"{name} ({data.num_nodes:,} nodes) P={P}: chosen {r['auto']['chosen']}, max peers "
                  f"{max(r['peers_per_part'])}, node imbalance {r['imbalance']['nodes']:.2f}, "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
            print("    " + ", ".join(f"{k} {v / best:.3f}" for k, v in cands.items()), flush=True)
    print("wins: " + ", ".join(f"{k} {n}" for k, n in sorted(wins.items(), key=lambda kv: -kv[1])))


def main() -> None:
    if "--balance-table" in sys.argv[1:]:  # a flag rather than a subcommand, as the issue names it
        bt = argparse.ArgumentParser(description=balance_table.__doc__)
        bt.add_argument("--balance-table", action="store_true")
        bt.add_argument("--datasets", default="cora,amazon-photo,coauthor-cs,"
                                              "/work/shared/data/fb100_cornell5/Cornell5.mat")
        bt.add_argument("--parts", default="8,32")
        bt.add_argument("--root", default="/work/shared/data")
        bt.add_argument("--network", default="ib", help="cost-model preset (nvlink, ib, ethernet)")
        bt.add_argument("--hidden", type=int, default=16, help="hidden width of the modelled GCN")
        bt.add_argument("--layers", type=int, default=2, help="layers of the modelled GCN")
        balance_table(bt.parse_args())
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--datasets", default="cora,amazon-photo,coauthor-cs")
    q.add_argument("--parts", default="4,8")
    q.add_argument("--root", default="/work/shared/data")
    q.set_defaults(func=quality)
    s = sub.add_parser("scale")
    s.add_argument("--graph", default="synthetic-2m")
    s.add_argument("--parts", type=int, default=8)
    s.add_argument("--method", default="auto", choices=("auto", "metis", "kaminpar", "hypergraph", "random"))
    s.add_argument("--threads", type=int, default=1, help="KaMinPar's threads (1: deterministic)")
    s.add_argument("--objective", default="vol", choices=("vol", "cut"))
    s.add_argument("--balance", default="auto")
    s.add_argument("--refine", default=True, action=argparse.BooleanOptionalAction)
    s.add_argument("--tmp", default=None, help="where to write the partition (deleted afterwards)")
    s.add_argument("--auto-budget", type=float, default=AUTO_BUDGET, help="auto's time budget (0: every candidate)")
    s.set_defaults(func=scale)
    b = sub.add_parser("backends", help=backends.__doc__.splitlines()[0])
    b.add_argument("--datasets", default=BACKEND_GRAPHS)
    b.add_argument("--parts", default="8,32")
    b.add_argument("--backends", default="kaminpar,hypergraph")
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--auto-budget", type=float, default=AUTO_BUDGET, help="auto's time budget (0: every candidate)")
    b.add_argument("--root", default="/work/shared/data")
    b.set_defaults(func=backends)
    rc = sub.add_parser("refine", help=refine_counts.__doc__.splitlines()[0])
    rc.add_argument("--graph", default="synthetic-2m")
    rc.add_argument("--parts", type=int, default=64)
    rc.add_argument("--counts", default="sparse", choices=("dense", "sparse"))
    rc.add_argument("--root", default="/work/shared/data")
    rc.add_argument("--start", default="kaminpar", choices=("kaminpar", "metis", "random"), help="the first partition")
    rc.set_defaults(func=refine_counts)
    st = sub.add_parser("settings", help=settings.__doc__.splitlines()[0])
    st.add_argument("--datasets", default=SETTINGS_GRAPHS)
    st.add_argument("--parts", default="8,32")
    st.add_argument("--root", default="/work/shared/data")
    st.add_argument("--network", default="ib", help="cost-model preset (nvlink, ib, ethernet)")
    st.add_argument("--hidden", type=int, default=16)
    st.add_argument("--layers", type=int, default=2)
    st.set_defaults(func=settings)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
