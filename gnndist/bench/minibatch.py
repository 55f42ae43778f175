"""Mini-batch GraphSAGE training of a peer library, run by the peers' own python: the other side of time-to-accuracy.

    PEER_PYTHON gnndist/bench/minibatch.py JOB.json     # PEER_PYTHON: gnndist.bench.peer_env.ensure().python

This file imports only torch, numpy, torch_geometric, torch_sparse and dgl, never gnndist: it runs in the
peers' venv (:mod:`gnndist.bench.peer_env`), found by gnndist at ``Path(gnndist.bench.__file__).parent``.

Peers (``peer`` in the job):

* ``pyg-neighbor``: ``torch_geometric.loader.NeighborLoader(input_nodes=training nodes, num_neighbors=fanouts,
  batch_size, shuffle=True)``; the loss on the batch's seed nodes (its first ``batch_size`` rows). The model runs on
  the whole sampled subgraph at every layer (trimming it per layer needs pyg-lib's per-hop counts, which the
  torch-sparse sampler does not give).
* ``pyg-cluster``: Cluster-GCN, ``ClusterData(num_parts)`` (METIS, in the set-up) and ``ClusterLoader(batch_size=
  clusters_per_batch, shuffle=True)``; the loss on the batch's training nodes; a batch without any takes no step.
* ``dgl-neighbor``: ``dgl.dataloading.NeighborSampler(fanouts)`` and ``dgl.dataloading.DataLoader`` over the
  training node ids (``shuffle=True``); the model runs on the sampled blocks.

All run their sampler in this process (no workers), so ``threads`` (``torch.set_num_threads``, ``OMP_NUM_THREADS``
and DGL's OpenMP pool) covers everything. The model is gnndist's ``GNN`` of ``SAGEConv`` s: ``layers`` SAGE-mean
layers, dropout before each (the input features too), ReLU between, no norm; PyG's ``SAGEConv(aggr="mean")`` or
DGL's ``SAGEConv(..., "mean")``. Loss: cross-entropy averaged over the batch's training nodes; ``torch.optim.Adam
(lr, weight_decay)``.

Job (JSON): ``problem`` (problem.npz), ``peer``, ``layers``, ``hidden``, ``dropout``, ``lr``, ``weight_decay``,
``batch_size`` (neighbor peers), ``fanouts`` (list of ``layers`` ints; neighbor peers), ``num_parts`` and
``clusters_per_batch`` (cluster), ``threads``, ``seed``, ``budget_s``, ``max_epochs`` (null: no limit),
``eval_every_s`` (null or 0: at epoch ends only), ``snapshots`` (a folder), ``mode`` (``train`` | ``check``).

problem.npz: ``indptr``, ``indices`` (int64 symmetric CSR, row i = the neighbours of i, no self-loops), ``x_indptr``,
``x_indices``, ``x_data``, ``x_shape`` (the features as CSR; made dense once in the set-up, as users feed ``data.x``),
``y`` (int64), ``train_mask``, ``val_mask``, ``test_mask`` (bool). Node i aggregates the rows of its CSR row: the
edges are ``indices[k] -> i``.

Protocol: stdout carries only the JSON lines below (everything else this process or its libraries print goes to
stderr); the caller answers on stdin.

1. ``{"event": "setup", "setup_s", "sha256": {array: hex}, "versions": {torch, numpy, torch_geometric,
   torch_sparse | dgl}}`` once data, model and sampler are set up. ``sha256`` is of each problem.npz array's
   bytes as stored (``np.ascontiguousarray(a).tobytes()``), so the caller checks the peer read what gnndist trained on.
2. ``mode: "check"``: the model built with ``seed`` runs once in eval mode on the full graph; its weights (named
   as 4. says) and the logits ``[N, C]`` (key ``logits``) go to ``snapshots/check.npz``; then
   ``{"event": "check", "path"}`` and exit 0.
3. ``mode: "train"``: the training clock starts at the first batch (sampling and feature gathering run inside
   it) and counts ``train_s``; it pauses for every evaluation.
4. An evaluation, at the end of every epoch, when ``train_s`` passes a multiple of ``eval_every_s``, and after the
   last step: the weights go to ``snapshots/step{steps:08d}.npz`` under gnndist's names (``convs.{i}.lin_l.weight``,
   ``convs.{i}.lin_l.bias``, ``convs.{i}.lin_r.weight``; float32), then ``{"event": "eval", "snapshot", "train_s",
   "epoch": fractional epochs done, "steps": optimiser steps}``, and the script reads one line from stdin: ``ok``
   continues, ``stop`` (or end of input) stops.
5. Training stops at ``train_s >= budget_s``, after ``max_epochs`` epochs, or at ``stop``; then
   ``{"event": "done", "train_s", "steps", "epochs", "s_per_epoch"}`` and exit 0.

Exit 2 with one line on stderr for a bad job or problem file; exit 3 when the peer's library cannot be imported.

gnndist's ``SAGEConv`` is ``lin_l(mean_j x_j) + lin_r(x_i)`` with the bias on ``lin_l``: PyG's ``SAGEConv`` has the same
names. DGL's is ``fc_self(x_i) + fc_neigh(mean_j x_j)`` with the bias on ``fc_self``: the sum is the same, so
``fc_neigh.weight -> lin_l.weight``, ``fc_self.bias -> lin_l.bias``, ``fc_self.weight -> lin_r.weight``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

PEERS = ("pyg-neighbor", "pyg-cluster", "dgl-neighbor")
PROBLEM_KEYS = ("indptr", "indices", "x_indptr", "x_indices", "x_data", "x_shape", "y", "train_mask", "val_mask",
                "test_mask")
DGL_NAMES = {"fc_neigh.weight": "lin_l.weight", "fc_self.bias": "lin_l.bias", "fc_self.weight": "lin_r.weight"}


class BadJob(Exception):
    """A job or problem file this script cannot run; the message is the one line on stderr."""


def read_job(path: str) -> dict:
    """The job, its keys checked (stdlib only: it runs before torch is imported, to set the thread counts)."""
    try:
        job = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise BadJob(f"job {path}: {e}") from None
    if not isinstance(job, dict):
        raise BadJob(f"job {path}: not a JSON object")
    need = ["problem", "peer", "layers", "hidden", "dropout", "lr", "weight_decay", "threads", "seed", "snapshots",
            "mode"]
    if job.get("peer") in ("pyg-neighbor", "dgl-neighbor"):
        need += ["batch_size", "fanouts"]
    elif job.get("peer") == "pyg-cluster":
        need += ["num_parts", "clusters_per_batch"]
    if job.get("mode") == "train":
        need += ["budget_s"]
    missing = [k for k in need if k not in job]
    if missing:
        raise BadJob(f"job {path}: missing {', '.join(missing)}")
    if job["peer"] not in PEERS:
        raise BadJob(f"job {path}: peer {job['peer']!r} is not one of {', '.join(PEERS)}")
    if job["mode"] not in ("train", "check"):
        raise BadJob(f"job {path}: mode {job['mode']!r} is not train or check")
    positive = ["layers", "hidden", "threads"] + [k for k in ("batch_size", "num_parts", "clusters_per_batch")
                                                   if k in need]
    for k in positive:
        if not isinstance(job[k], int) or job[k] < 1:
            raise BadJob(f"job {path}: {k} must be an integer >= 1, got {job[k]!r}")
    if not (isinstance(job["dropout"], (int, float)) and 0 <= job["dropout"] < 1):
        raise BadJob(f"job {path}: dropout must be in [0, 1), got {job['dropout']!r}")
    if "fanouts" in need:
        f = job["fanouts"]
        if not (isinstance(f, list) and len(f) == job["layers"] and all(isinstance(v, int) and (v > 0 or v == -1)
                                                                        for v in f)):
            raise BadJob(f"job {path}: fanouts must be a list of {job['layers']} (layers) ints > 0 or -1, got {f!r}")
    for k in ("budget_s", "eval_every_s", "max_epochs"):
        v = job.get(k)
        if (v is not None or k in need) and not (isinstance(v, (int, float)) and v >= 0):
            raise BadJob(f"job {path}: {k} must be a number >= 0{'' if k in need else ' or null'}, got {v!r}")
    if not Path(job["problem"]).is_file():
        raise BadJob(f"job {path}: problem {job['problem']} is not a file")
    return job


class Protocol:
    """The JSON lines to the caller on the real stdout, its answers from stdin; file descriptor 1 is stderr after
    this, so what libraries print (C code included) cannot break a line."""

    def __init__(self):
        sys.stdout.flush()
        self.out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def send(self, event: str, **fields) -> None:
        self.out.write(json.dumps({"event": event, **fields}) + "\n")

    def proceed(self) -> bool:
        """The caller's answer: ``ok`` -> True; ``stop`` or end of input -> False."""
        answer = sys.stdin.readline().strip()
        if answer not in ("ok", "stop", ""):
            print(f"minibatch: unexpected answer {answer!r}, stopping", file=sys.stderr)
        return answer == "ok"


def load_problem(path: str) -> tuple[dict, dict]:
    """The arrays of problem.npz and the sha256 of each one's bytes."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in PROBLEM_KEYS if k not in z.files]
            if missing:
                raise BadJob(f"problem {path}: missing {', '.join(missing)}")
            arrays = {k: z[k] for k in PROBLEM_KEYS}
    except (OSError, ValueError) as e:
        raise BadJob(f"problem {path}: {e}") from None
    digest = {k: hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() for k, a in arrays.items()}
    n = arrays["indptr"].shape[0] - 1
    shape = tuple(int(v) for v in arrays["x_shape"])
    if len(shape) != 2 or shape[0] != n or arrays["y"].shape != (n,) or any(
            arrays[m].shape != (n,) or arrays[m].dtype != bool for m in ("train_mask", "val_mask", "test_mask")):
        raise BadJob(f"problem {path}: {n} nodes in indptr, but x_shape {shape}, y {arrays['y'].shape}, masks "
                     f"{[arrays[m].shape for m in ('train_mask', 'val_mask', 'test_mask')]} (bool needed)")
    if not arrays["train_mask"].any():
        raise BadJob(f"problem {path}: no training node")
    return arrays, digest


def tensors(arrays: dict):
    """``x`` dense ``[N, F]`` float32, ``y`` ``[N]``, the masks, and the edges ``src, dst`` (``[E]`` each)."""
    import numpy as np
    import torch

    n, f = (int(v) for v in arrays["x_shape"])
    x = np.zeros((n, f), dtype=np.float32)  # [N, F]
    x[np.repeat(np.arange(n), np.diff(arrays["x_indptr"])), arrays["x_indices"]] = arrays["x_data"]
    x = torch.from_numpy(x)
    indptr = torch.from_numpy(arrays["indptr"]).long()
    src = torch.from_numpy(arrays["indices"]).long()  # [E]
    dst = torch.repeat_interleave(torch.arange(n), indptr.diff())  # [E]: row i aggregates its row's neighbours
    masks = {m: torch.from_numpy(arrays[m]) for m in ("train_mask", "val_mask", "test_mask")}
    return x, torch.from_numpy(arrays["y"]).long(), masks, src, dst


def widths(job: dict, in_channels: int, classes: int) -> list[int]:
    return [in_channels] + [job["hidden"]] * (job["layers"] - 1) + [classes]


def gnndist_weights(model, dgl: bool) -> dict:
    """The model's parameters as float32 arrays under gnndist's names (``convs.{i}.lin_l.weight`` ...)."""
    out = {}
    for name, p in model.state_dict().items():
        if dgl:
            head, i, rest = name.split(".", 2)  # convs, i, fc_neigh.weight
            name = f"{head}.{i}.{DGL_NAMES[rest]}"
        out[name] = p.detach().float().cpu().numpy()
    return out


# The peers: each a model class and a `batches(job, data) -> (loader, step_fn)` maker

def pyg_model(job: dict, in_channels: int, classes: int):
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import SAGEConv

    class PygSAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            w = widths(job, in_channels, classes)
            self.convs = torch.nn.ModuleList(SAGEConv(a, b, aggr="mean") for a, b in zip(w[:-1], w[1:]))

        def forward(self, x, edge_index):  # x [n, F], edge_index [2, e] -> [n, C]
            for i, conv in enumerate(self.convs):
                x = F.dropout(x, job["dropout"], self.training)
                x = conv(x, edge_index)
                if i < len(self.convs) - 1:
                    x = F.relu(x)
            return x

    return PygSAGE()


def dgl_model(job: dict, in_channels: int, classes: int):
    import torch
    import torch.nn.functional as F
    from dgl.nn import SAGEConv

    class DglSAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            w = widths(job, in_channels, classes)
            self.convs = torch.nn.ModuleList(SAGEConv(a, b, "mean") for a, b in zip(w[:-1], w[1:]))

        def forward(self, graphs, x):  # graphs: one per layer (blocks, or the full graph each time)
            for i, (conv, g) in enumerate(zip(self.convs, graphs)):
                x = F.dropout(x, job["dropout"], self.training)
                x = conv(g, x)  # [dst nodes of g, width]
                if i < len(self.convs) - 1:
                    x = F.relu(x)
            return x

    return DglSAGE()


def pyg_setup(job: dict, x, y, masks, src, dst):
    """``(model, full, epoch, batches_per_epoch)`` of a PyG peer. Check mode: ``full()`` is the model's forward on
    the whole graph (``epoch`` None). Train mode: ``epoch()`` yields per batch ``(logits [n, C], labels [n])`` of
    the batch's loss nodes, or ``(None, None)`` for a batch without any (``full`` None)."""
    import torch
    from torch_geometric.data import Data

    data = Data(x=x, y=y, edge_index=torch.stack([src, dst]), train_mask=masks["train_mask"], num_nodes=x.shape[0])
    model = pyg_model(job, x.shape[1], int(y.max()) + 1)
    if job["mode"] == "check":  # through a sparse adjacency: the messages [E, width] of edge_index may not fit
        from torch_sparse import SparseTensor

        adj_t = SparseTensor(row=dst, col=src, sparse_sizes=(x.shape[0], x.shape[0]))  # [N, N]: row = destination
        return model, lambda: model(data.x, adj_t), None, 0
    if job["peer"] == "pyg-neighbor":
        from torch_geometric.loader import NeighborLoader

        train = masks["train_mask"].nonzero().view(-1)
        loader = NeighborLoader(data, num_neighbors=job["fanouts"], batch_size=job["batch_size"],
                                input_nodes=train, shuffle=True, num_workers=0)

        def epoch():
            for b in loader:
                out = model(b.x, b.edge_index)[: b.batch_size]  # [batch_size, C]: the seed nodes
                yield out, b.y[: b.batch_size]

        return model, None, epoch, math.ceil(train.numel() / job["batch_size"])
    from torch_geometric.loader import ClusterData, ClusterLoader

    clusters = ClusterData(data, num_parts=job["num_parts"], log=False)
    loader = ClusterLoader(clusters, batch_size=job["clusters_per_batch"], shuffle=True, num_workers=0)

    def epoch():
        for b in loader:
            if b.train_mask.any():
                yield model(b.x, b.edge_index)[b.train_mask], b.y[b.train_mask]  # [training nodes in b, C]
            else:
                yield None, None

    return model, None, epoch, len(loader)


def dgl_setup(job: dict, x, y, masks, src, dst):
    """As :func:`pyg_setup`, with DGL: the full graph is the graph of every layer, the batches are its blocks."""
    import dgl

    g = dgl.graph((src, dst), num_nodes=x.shape[0])
    model = dgl_model(job, x.shape[1], int(y.max()) + 1)
    if job["mode"] == "check":
        return model, lambda: model([g] * job["layers"], x), None, 0
    train = masks["train_mask"].nonzero().view(-1)
    sampler = dgl.dataloading.NeighborSampler(job["fanouts"])
    loader = dgl.dataloading.DataLoader(g, train, sampler, batch_size=job["batch_size"], shuffle=True,
                                        drop_last=False, num_workers=0)

    def epoch():
        for input_nodes, output_nodes, blocks in loader:
            yield model(blocks, x[input_nodes]), y[output_nodes]  # [len(output_nodes), C]

    return model, None, epoch, math.ceil(train.numel() / job["batch_size"])


def versions(peer: str) -> dict:
    import numpy as np
    import torch

    out = {"torch": torch.__version__, "numpy": np.__version__}
    if peer.startswith("pyg"):
        import torch_geometric
        import torch_sparse

        out.update(torch_geometric=torch_geometric.__version__, torch_sparse=torch_sparse.__version__)
    else:
        import dgl

        out["dgl"] = dgl.__version__
    return out


def train(job: dict, proto: Protocol, model, epoch, batches_per_epoch: int) -> None:
    """Steps 3-5 of the protocol."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    snapshots = Path(job["snapshots"])
    dgl = job["peer"].startswith("dgl")
    optim = torch.optim.Adam(model.parameters(), lr=job["lr"], weight_decay=job["weight_decay"])
    budget, every, max_epochs = job["budget_s"], job.get("eval_every_s") or 0, job.get("max_epochs")
    train_s, steps, epochs, batches = 0.0, 0, 0, 0
    next_eval = every or math.inf
    last_eval = -1  # `steps` at the last evaluation

    def evaluate() -> bool:
        nonlocal last_eval
        last_eval = steps
        path = snapshots / f"step{steps:08d}.npz"
        np.savez(path, **gnndist_weights(model, dgl))
        proto.send("eval", snapshot=str(path), train_s=round(train_s, 6),
                   epoch=round(epochs + batches / max(batches_per_epoch, 1), 6), steps=steps)
        return proto.proceed()

    go = budget > 0 and (max_epochs is None or max_epochs > 0)
    while go:
        model.train()
        batches = 0
        t0 = time.perf_counter()
        for out, labels in epoch():
            if out is not None:
                loss = F.cross_entropy(out, labels)
                optim.zero_grad(set_to_none=True)
                loss.backward()
                optim.step()
                steps += 1
            batches += 1
            now = train_s + time.perf_counter() - t0
            if now >= next_eval or now >= budget:
                train_s = now
                next_eval = (math.floor(train_s / every) + 1) * every if every else math.inf
                if now >= budget or not evaluate():
                    go = False
                    break
                t0 = time.perf_counter()  # the clock resumes
        else:
            train_s += time.perf_counter() - t0
            epochs, batches = epochs + 1, 0
            if max_epochs is not None and epochs >= max_epochs:
                go = False
            if last_eval != steps and not evaluate():  # unless the clock's evaluation just took this step
                go = False
            if train_s >= budget:
                go = False
    if last_eval != steps:
        evaluate()  # the final weights, whatever the answer
    done = epochs + batches / max(batches_per_epoch, 1)
    proto.send("done", train_s=round(train_s, 6), steps=steps, epochs=round(done, 6),
               s_per_epoch=round(train_s / done, 6) if done else None)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: minibatch.py JOB.json", file=sys.stderr)
        return 2
    try:
        job = read_job(argv[1])
    except BadJob as e:
        print(f"minibatch: {e}", file=sys.stderr)
        return 2
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before torch and dgl load their OpenMP
        os.environ[var] = str(job["threads"])
    proto = Protocol()
    try:
        import numpy as np
        import torch

        setup = dgl_setup if job["peer"].startswith("dgl") else pyg_setup
        found = versions(job["peer"])
    except ImportError as e:
        print(f"minibatch: peer {job['peer']} unavailable: {e}", file=sys.stderr)
        return 3
    t0 = time.perf_counter()  # the set-up: data, model, sampler (imports excluded)
    torch.set_num_threads(job["threads"])
    if job["peer"].startswith("dgl"):
        import warnings

        import dgl

        # said at every epoch; it is about pinning sampler workers to cores, and this process has none
        warnings.filterwarnings("ignore", message="Dataloader CPU affinity opt is not enabled")

        dgl.utils.set_num_threads(job["threads"])
        dgl.seed(job["seed"])
    torch.manual_seed(job["seed"])
    np.random.seed(job["seed"])
    try:
        arrays, digest = load_problem(job["problem"])
    except BadJob as e:
        print(f"minibatch: {e}", file=sys.stderr)
        return 2
    x, y, masks, src, dst = tensors(arrays)
    snapshots = Path(job["snapshots"])
    snapshots.mkdir(parents=True, exist_ok=True)
    model, full, epoch, batches_per_epoch = setup(job, x, y, masks, src, dst)
    proto.send("setup", setup_s=round(time.perf_counter() - t0, 6), sha256=digest, versions=found)
    if job["mode"] == "check":
        model.eval()
        with torch.no_grad():
            logits = full()  # [N, C]
        path = snapshots / "check.npz"
        np.savez(path, logits=logits.float().numpy(), **gnndist_weights(model, job["peer"].startswith("dgl")))
        proto.send("check", path=str(path))
        return 0
    train(job, proto, model, epoch, batches_per_epoch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
