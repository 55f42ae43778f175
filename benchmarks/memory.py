"""Peak memory per rank of gnndist training on P ranks against one rank, same graph and model.

Each rank is a fresh spawned process (P = 1 too, so both pay the same imports and the same
gloo set-up) that joins a gloo group, loads its part, builds the ``Trainer`` and runs
``--epochs`` training steps and one evaluation. It reports

    base    resident memory after imports, ``init`` and a first ``torch.optim.Adam`` (whose
            lazy imports alone take ~170 MB), before the part is loaded (VmRSS)
    load    VmHWM - base after ``DistGraph`` and ``Trainer`` are built
    peak    VmHWM - base after training: the rank's high-water mark of what gnndist added

from ``/proc/self/status``. With glibc's default (dynamic) mmap threshold, freed blocks below
32 MB stay in the heap and fragment it; a rank of P = 4 has many more tensors of that size than
one rank has, so its high-water mark carries proportionally more: ``--malloc-mmap-threshold
1048576`` (``MALLOC_MMAP_THRESHOLD_``) fixes the threshold and shows the difference. The ratio is
max over ranks of ``peak`` at P ranks divided by ``peak`` at one rank (goal <= 0.35 at P = 4; 0.25
is a perfect split, the halo and the replicated weights are the rest).

Graph: ``gnndist.datasets.synthetic(N, avg_degree=10, num_features=64)`` (1M nodes), METIS
partitions cached under ``--cache``; model: 2-layer GCN, hidden ``--hidden`` (16), dropout 0.5.

    python benchmarks/memory.py                      # 1M nodes, P = 1 and 4
    python benchmarks/memory.py --quick              # 100k nodes
    python benchmarks/memory.py --malloc-mmap-threshold 1048576   # glibc: no dynamic mmap threshold
    python benchmarks/memory.py --nodes 2000000 --parts 1,2,4 --hidden 64

``--part DIR`` measures an existing partition instead (as many ranks as it has parts) and adds,
per rank, its local adjacency entries, the bytes per entry above the baseline once the features
(``n_owned x F x 4``) are taken away, and every per-entry array the rank's block keeps
(:func:`entry_arrays`: the CSRs of the layout and what their kernels cached on them):

    python benchmarks/memory.py --part /tmp/hc/p1m --epochs 2
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from pathlib import Path


def proc_status() -> dict[str, int]:
    """VmRSS / VmHWM of this process in bytes."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def entry_arrays(graph) -> dict[str, tuple[str, int]]:
    """Every tensor of at least one element per local entry the rank's layouts keep: ``name -> (dtype, bytes)``.

    The CSRs of each built block (interior, boundary; a full CSR if built), their cached row
    index, transposes (pattern or with its permutation) and kernel caches, and the graph's own
    derived CSR (per-edge layers), and the part's CSR where the structure holds one (before issue 33).
    """
    import torch
    from gnndist.kernels import CSR

    found: dict[str, tuple[str, int]] = {}
    seen: set[int] = set()

    storages: set[int] = set()

    def tensor(name: str, t, nnz: int) -> None:
        if isinstance(t, torch.Tensor) and nnz and t.numel() >= nnz:
            ptr = t.untyped_storage().data_ptr()
            if ptr not in storages:  # a tensor sharing another's memory (a sparse matrix's values) once
                storages.add(ptr)
                found[name] = (str(t.dtype).replace("torch.", ""), t.untyped_storage().nbytes())

    def csr(name: str, c) -> None:
        if not isinstance(c, CSR) or id(c) in seen:
            return
        seen.add(id(c))
        tensor(f"{name}.col", c.col, c.nnz)
        tensor(f"{name}.row (cached)", c._row, c.nnz)
        if getattr(c, "symmetric", False):
            found[f"{name}.transposed()"] = ("itself (symmetric)", 0)
        if getattr(c, "_transposed", None) is not None:
            csr(f"{name}.transposed()", c._transposed)
        if c._transpose is not None:
            csr(f"{name}.transpose()", c._transpose[0])
            tensor(f"{name}.transpose() perm", c._transpose[1], c.nnz)
        for key, v in c._cache.items():
            if isinstance(v, list) and v and isinstance(v[0], tuple):  # torch.sparse blocks of rows (sparse.row_blocks)
                values = [m.values() for _, m in v]
                nbytes = sum(t.untyped_storage().nbytes() for t in values if t.stride() != (0,))
                found[f"{name} cache {key[0]} values"] = (str(values[0].dtype).replace("torch.", ""), nbytes)
            elif getattr(v, "layout", None) == torch.sparse_csr:  # shares the CSR's indices; its values may not
                tensor(f"{name} cache {key[0]} values", v.values(), c.nnz)
            elif isinstance(v, torch.Tensor):
                tensor(f"{name} cache {key[0]}", v, c.nnz)

    if "csr" in getattr(type(graph.structure), "__dataclass_fields__", {}):  # a structure that holds its own CSR
        csr("structure.csr", graph.structure.csr)
    layouts = [graph.strategy] + list(getattr(graph.strategy, "options", []) or [])
    for lay in layouts:
        block = getattr(lay, "block", None)
        if block is not None:
            csr(f"{lay.name} interior", block.csr_int)
            csr(f"{lay.name} boundary", block.csr_bnd)
            if block._full is not None:
                csr(f"{lay.name} full", block._full)
    if "csr" in graph._derived:
        csr("graph.csr", graph._derived["csr"])
    return found


def rank_main(grid, partdir: str, hidden: int, epochs: int, dropout: float = 0.5) -> list[dict]:
    """One rank (under ``gnndist.launch``): load the part, train ``epochs`` steps + one evaluation; every rank's
    memory."""
    import torch

    from gnndist.config import ModelConfig, RunConfig, TrainConfig
    from gnndist.graph import DistGraph
    from gnndist.training.trainer import Trainer

    torch.set_num_threads(1)  # same threads per rank at every P (memory does not depend on it)
    warm = torch.zeros(1, requires_grad=True)  # Adam's first use imports ~170 MB (torch._dynamo): not ours
    torch.optim.Adam([warm]).step()
    base = proc_status()["VmRSS"]
    graph = DistGraph.load(partdir, grid, normalize_features=True)
    cfg = TrainConfig(model=ModelConfig(hidden=hidden, dropout=dropout), run=RunConfig(progress=False))
    trainer = Trainer(graph, cfg)
    load = proc_status()["VmHWM"] - base
    t0 = time.perf_counter()
    for epoch in range(epochs):
        with graph.context.step(seed=cfg.run.seed, epoch=epoch):  # as Trainer.epoch: the step's masks and hooks
            trainer.train_step(epoch)
    acc = trainer.evaluate()
    seconds = (time.perf_counter() - t0) / epochs
    peak = proc_status()["VmHWM"] - base
    mine = {"base": base, "load": load, "peak": peak, "n_owned": graph.n_owned, "n_halo": graph.n_halo,
            "step_s": seconds, "val_acc": acc["val_acc"], "nnz": graph.layout1d.block.nnz,
            "features": graph.x.numel() * graph.x.element_size(), "entries": entry_arrays(graph)}
    return grid.all_gather_object(mine)


def _launch(partdir: str, world: int, hidden: int, epochs: int, dropout: float = 0.5) -> list[dict]:
    import gnndist

    return gnndist.launch(rank_main, partdir, hidden, epochs, dropout, ranks=world, backend="gloo", timeout=1800)


def measure(partdir: Path, world: int, hidden: int, epochs: int, dropout: float = 0.5) -> list[dict]:
    """Every rank's memory, from a fresh process (P = 1 too: both pay the same imports and gloo set-up)."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(_launch, str(partdir), world, hidden, epochs, dropout).result()


def ensure_partitions(nodes: int, parts: list[int], cache: Path) -> dict[int, Path]:
    """METIS partitions of the synthetic graph, one per P, generated once and cached."""
    dirs = {p: cache / f"synthetic-{nodes}-d10-f64-p{p}" for p in parts}
    missing = [p for p, d in dirs.items() if not (d / "META.json").is_file()]
    if missing:
        from gnndist.datasets import synthetic
        from gnndist.partition import partition

        t0 = time.perf_counter()
        data = synthetic(nodes, avg_degree=10, num_features=64, seed=0, name=f"synthetic-{nodes}")
        print(f"generated N={data.num_nodes:,} E={data.edge_index.shape[1]:,} in {time.perf_counter() - t0:.0f} s",
              flush=True)
        for p in missing:
            t0 = time.perf_counter()
            partition(data, p).save(dirs[p], dataset=f"synthetic-{nodes}")
            print(f"partitioned into {p} in {time.perf_counter() - t0:.0f} s -> {dirs[p]}", flush=True)
        del data
    return dirs


def per_entry(partdir: Path, hidden: int, epochs: int, dropout: float) -> None:
    """Per rank of ``partdir``: entries, MiB above the baseline at load and peak, bytes per entry, the arrays kept."""
    import json

    world = json.loads((partdir / "META.json").read_text())["parts"]
    rows = measure(partdir, world, hidden, epochs, dropout)
    print(f"{partdir}: {world} ranks, GCN hidden {hidden}, dropout {dropout}, {epochs} steps + 1 eval, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'rank':>4s} {'entries':>11s} {'base MiB':>9s} {'load MiB':>9s} {'peak MiB':>9s} {'features MiB':>13s} "
          f"{'B/entry (peak - features)':>26s}")
    for r, v in enumerate(rows):
        print(f"{r:4d} {v['nnz']:11,d} {mib(v['base']):>9s} {mib(v['load']):>9s} {mib(v['peak']):>9s} "
              f"{mib(v['features']):>13s} {(v['peak'] - v['features']) / max(v['nnz'], 1):26.1f}")
    print("per-entry arrays rank 0 keeps (bytes / its entries):")
    for name, (dtype, nbytes) in rows[0]["entries"].items():
        print(f"  {name:<40s} {dtype:<20s} {nbytes / max(rows[0]['nnz'], 1):6.2f}")


def mib(b: float) -> str:
    return f"{b / 2**20:8.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--parts", default="1,4", help="comma list of world sizes; the first is the reference")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--dropout", type=float, default=0.5, help="the GCN's dropout (0: no [n, F] masks in the step)")
    ap.add_argument("--epochs", type=int, default=3, help="training steps per rank (then one evaluation)")
    ap.add_argument("--cache", default="/tmp/gnndist-memory-bench", help="where partitions are kept")
    ap.add_argument("--malloc-mmap-threshold", type=int, default=None, metavar="BYTES",
                    help="set MALLOC_MMAP_THRESHOLD_ in the ranks (glibc: fixed threshold, no dynamic growth)")
    ap.add_argument("--quick", action="store_true", help="100k nodes")
    ap.add_argument("--part", default=None, metavar="DIR",
                    help="measure this partition (as many ranks as it has parts): bytes per local entry")
    args = ap.parse_args()
    if args.malloc_mmap_threshold is not None:  # read by glibc when a spawned rank starts
        os.environ["MALLOC_MMAP_THRESHOLD_"] = str(args.malloc_mmap_threshold)
    if args.part:
        return per_entry(Path(args.part), args.hidden, args.epochs, args.dropout)
    if args.quick:
        args.nodes = 100_000
    parts = [int(p) for p in args.parts.split(",")]
    dirs = ensure_partitions(args.nodes, parts, Path(args.cache))
    rows = {}
    for p in parts:
        rows[p] = measure(dirs[p], p, args.hidden, args.epochs)
        print(f"P={p}: peak per rank (MiB) {[round(r['peak'] / 2**20) for r in rows[p]]}  "
              f"load {os.getloadavg()[0]:.2f}", flush=True)

    ref = max(r["peak"] for r in rows[parts[0]])
    print(f"\nper-rank memory, synthetic N={args.nodes:,} avg degree 10 F=64, GCN hidden {args.hidden}, "
          f"{args.epochs} steps + 1 eval (MiB above the post-import baseline), "
          f"MALLOC_MMAP_THRESHOLD_={os.environ.get('MALLOC_MMAP_THRESHOLD_', 'unset')}")
    print(f"{'P':>3s} {'rank':>4s} {'n_owned':>9s} {'n_halo':>9s} {'base':>8s} {'load':>8s} {'peak':>8s} "
          f"{'peak/P1':>8s} {'step s':>7s}")
    for p, rs in rows.items():
        for r, v in enumerate(rs):
            print(f"{p:3d} {r:4d} {v['n_owned']:9,d} {v['n_halo']:9,d} {mib(v['base'])} {mib(v['load'])} "
                  f"{mib(v['peak'])} {v['peak'] / ref:8.2f} {v['step_s']:7.2f}")
    for p in parts[1:]:
        worst = max(r["peak"] for r in rows[p])
        print(f"max peak at P={p} / peak at P={parts[0]}: {worst / ref:.2f}x "
              f"(goal <= 0.35 at P=4; ideal {parts[0] / p:.2f})")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
