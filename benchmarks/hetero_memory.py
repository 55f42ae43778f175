"""Per-rank bytes of the embedding tables of a typed graph: each rank's own rows (1/P of the table) plus its halo.

On ``synthetic-mag-<N>`` with ``--model rgcn`` (featureless author, institution and field_of_study learn a row
each), per rank after one training step: the rows it holds (``NodeEmbedding.weight``, and Adam's two moments of
the same shape), the featureless rows it received in the first layer's exchange (measured by the byte counter,
layer0 ``fwd_received`` split by the type of each halo row) and the whole table's bytes, for comparison.

    python benchmarks/hetero_memory.py                          # synthetic-mag-20k, P = 1, 2, 4
    python benchmarks/hetero_memory.py --papers 50000 --worlds 1,4
"""

from __future__ import annotations

import argparse
import os
import tempfile

import gnndist


def measure(grid, partdir: str):
    graph = gnndist.DistGraph.load(partdir, grid)
    cfg = gnndist.TrainConfig()
    cfg.model.model, cfg.optim.epochs, cfg.run.progress = "rgcn", 1, False
    trainer = gnndist.Trainer(graph, cfg)
    trainer.fit()
    emb = trainer.model.embedding
    state = trainer.optim.state[emb.weight]
    featureless = [not f for f in graph.hetero.featured]
    halo_types = graph.node_type[graph.n_owned :]
    halo_rows = int(sum(int((halo_types == t).sum()) for t, f in enumerate(featureless) if f))
    row_bytes = emb.weight.shape[1] * emb.weight.element_size()
    received = trainer.step_bytes.get("layer0", {}).get("fwd_received", 0)
    mine = dict(rows=emb.weight.shape[0], table_rows=emb.table_rows, row_bytes=row_bytes,
                weight_bytes=emb.weight.numel() * emb.weight.element_size(),
                adam_bytes=sum(v.numel() * v.element_size() for v in state.values() if v.dim() == 2),
                halo_rows=halo_rows, halo_bytes=halo_rows * row_bytes, layer0_received=received,
                layer0_halo_rows=graph.n_halo)
    return grid.all_gather_object(mine)  # every rank's, to rank 0 (what launch returns)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--papers", type=int, default=20000)
    ap.add_argument("--worlds", default="1,2,4")
    args = ap.parse_args()
    from gnndist.datasets import load
    from gnndist.partition import partition

    print(f"load average at start: {os.getloadavg()}", flush=True)
    data = load(f"synthetic-mag-{args.papers}")
    print(f"{'P':>2s} {'rank':>4s} {'own rows':>9s} {'of table':>9s} {'share':>6s} {'weight MiB':>10s} "
          f"{'Adam MiB':>8s} {'halo rows':>9s} {'halo MiB':>8s} {'layer0 recv MiB':>15s}")
    mib = 2**20
    with tempfile.TemporaryDirectory(prefix="gnndist-hetero-mem-") as tmp:
        for w in (int(v) for v in args.worlds.split(",")):
            d = os.path.join(tmp, f"p{w}")
            partition(data, w, progress=False).save(d, dataset=f"synthetic-mag-{args.papers}", progress=False)
            for r, m in enumerate(gnndist.launch(measure, d, ranks=w)):
                print(f"{w:2d} {r:4d} {m['rows']:9,d} {m['table_rows']:9,d} {m['rows'] / m['table_rows']:6.3f} "
                      f"{m['weight_bytes'] / mib:10.2f} {m['adam_bytes'] / mib:8.2f} {m['halo_rows']:9,d} "
                      f"{m['halo_bytes'] / mib:8.2f} {m['layer0_received'] / mib:15.2f}", flush=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
