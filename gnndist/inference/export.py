"""``gnndist export``: a trained model as a plain file that needs no gnndist partition, or as a PyG model.

    gnndist export --checkpoint CKDIR --out model.pt                 # {"state_dict", "config", "in", "out"}
    gnndist export --checkpoint CKDIR --out pyg.pt --format pyg      # loads into the model's torch_geometric twin

The ``pyg`` format is for the models with an exact twin built of ``torch_geometric`` layers
(``--arch plain``, any ``--norm``; ``gin`` with ``--norm none``): ``--model gcn`` ->
``torch_geometric.nn.models.GCN``, ``sage`` -> ``GraphSAGE``, ``gin`` -> ``GIN``; ``gat``,
``gcn2``, ``gine`` -> :mod:`gnndist.pyg_twins` (PyG's ``GAT`` averages heads in its output
layer, and PyG has no GCNII or GINE model; that file imports nothing of gnndist); ``rgcn`` -> its ``RGCN``, PyG's
``RGCNConv`` layers on the typed graph's union graph with one ``nn.Embedding`` per featureless type (the
checkpoint's whole table, cut by type). The state dict is renamed to the twin's names, and the file says
how to build it::

    import importlib, torch
    f = torch.load("pyg.pt")
    model = getattr(importlib.import_module(f["module"]), f["model"])(**f["kwargs"])
    model.load_state_dict(f["state_dict"])
    model.eval()
    logits = model(x, edge_index)      # x row-normalised if f["normalize_features"]; gine: + edge_attr;
                                       # f["edge_weights"] (--edge-weights): + the graph's edge_weight
    logits = model(x, edge_index, edge_type, node_type)    # rgcn: the union graph (see pyg_twins.RGCN)

Any other model whose layers are all :class:`~gnndist.nn.PyGAdapter` (with torch modules and
``DistBatchNorm`` between them) is written as ``"model": None``: ``f["layers"]`` holds each wrapped
PyG conv's own state dict by its path, and ``f["state_dict"]`` the whole model's with every adapter
replaced by its conv (``convs.0.conv.lin.weight`` -> ``convs.0.lin.weight``), for the same model
built with the PyG layers in place. A model with a gnndist layer of its own (``--arch residual``,
``gen``, ``resgcn``, ``revgnn``) has no exact twin: one line, use ``--format gnndist``.

In eval mode the twin gives gnndist's logits (dropout is the only difference in training).

A link predictor (``--task link``) writes its encoder so, with ``f["task"] == "link"``, its decoder and its
learned rows (a featureless graph's, or with ``--embedding learn`` those beside the features)::

    if f["embedding"] is not None:                                    # [N, in] or [N, hidden] beside [N, F]
        x = torch.cat([x, f["embedding"]], 1) if f["embedding_beside"] else f["embedding"]
    h = model(x, edge_index)                                          # the message graph's edges
    d = f["decoder"]                                                  # {"kind": "dot" | "mlp", "state_dict"}
    score = (h[u] * h[v]).sum(-1)                                     # dot; mlp: OGB's LinkPredictor(h[u], h[v])
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from gnndist.datasets.schema import HeteroSchema
from gnndist.errors import UserError

BASIC = "torch_geometric.nn.models"  # a twin there is one of PyG's BasicGNNs; else one of gnndist.pyg_twins
FORMATS = ("gnndist", "pyg")
PYG_NORMS = {"none": {}, "batch": {"norm": "batch_norm"},  # --norm -> BasicGNN's norm arguments
             "layer": {"norm": "layer_norm", "norm_kwargs": {"mode": "node"}}}


def _unwrapped(model, state: dict, own_layers: bool) -> tuple[dict, dict]:
    """``state`` with every PyGAdapter replaced by its conv and every DistBatchNorm by a ``BatchNorm1d``;
    ``{adapter path: {"class", "state_dict"}}`` of the wrapped convs. Without ``own_layers``, one line for
    a gnndist layer of the model's own (it has no PyG twin)."""
    from gnndist.nn import DistBatchNorm, PyGAdapter
    from gnndist.nn.models import MODELS

    adapters, norms = {}, []
    for path, mod in model.named_modules():
        if not path or any(path.startswith(a + ".") for a in adapters):
            continue  # the model itself (a container), or inside a PyG conv
        if isinstance(mod, PyGAdapter):
            conv = mod.conv
            adapters[path] = {"class": f"{type(conv).__module__}.{type(conv).__qualname__}",
                              "state_dict": dict(conv.state_dict())}
        elif isinstance(mod, DistBatchNorm):
            norms.append(path)
        elif not own_layers and type(mod).__module__.startswith("gnndist."):
            raise UserError(f"--format pyg: {path} ({type(mod).__name__}) is a gnndist layer with no torch_geometric "
                            f"twin; --format pyg is for --model {', '.join(n for n, s in MODELS.items() if s.twin)} "
                            f"with --arch "
                            f"plain, or a model of PyGAdapter layers: use --format gnndist")
    out = {}
    for k, v in state.items():
        a = next((a for a in adapters if k.startswith(a + ".conv.")), None)
        out[k if a is None else a + "." + k[len(a) + len(".conv."):]] = v
    for path in norms:  # the counter BatchNorm1d keeps (unused in eval mode)
        out[f"{path}.num_batches_tracked"] = torch.zeros((), dtype=torch.long)
    return out, adapters


def _basic_state(twin: str, state: dict, norm: str) -> dict:
    """``state`` in the names of PyG's BasicGNN twin: GIN's MLP ``nn.0/2`` -> ``nn.lins.0/1``, and PyG's
    ``BatchNorm`` wraps a ``BatchNorm1d`` as ``module``."""
    out = {}
    for k, v in state.items():
        if twin == "GIN":
            k = k.replace(".nn.0.", ".nn.lins.0.").replace(".nn.2.", ".nn.lins.1.")
        if norm == "batch" and k.startswith("norms."):
            head, i, rest = k.split(".", 2)
            k = f"{head}.{i}.module.{rest}"  # norms.0.weight -> norms.0.module.weight
        out[k] = v
    return out


def _hetero_file(twin: str, state: dict, config: dict, path: Path) -> dict:
    """R-GCN's twin (:class:`gnndist.pyg_twins.RGCN`): the checkpoint's whole embedding table (every featureless
    node, in dataset order) cut into one ``nn.Embedding`` per featureless type; the twin loads it, strictly."""
    from gnndist import pyg_twins

    m = config["model"]
    if "hetero" not in config:
        raise UserError(f"{path} does not record the typed graph's schema (written before 2026-12-02): export it "
                        f"with --format gnndist, or train again")
    h = HeteroSchema.from_meta(config["hetero"])  # the checkpoint holds META.json's form
    learned = "embedding.weight" in state
    rows = {t: n for t, n, f in zip(h.node_types, h.counts(), h.featured) if not f} if learned else {}
    dotted = [t for t in rows if "." in t]
    if dotted:
        raise UserError(f"--format pyg: the featureless node type {dotted[0]!r} has a '.', which cannot name the "
                        f"twin's embedding (a torch module name): export it with --format gnndist")
    out = {k: v for k, v in state.items() if not k.startswith("embedding.")}
    if rows:
        for t, table in zip(rows, state["embedding.weight"].split(list(rows.values()))):  # [n_t, in] per type
            out[f"embeddings.{t}.weight"] = table
    norm = m.get("norm", "none")
    if norm == "batch":  # DistBatchNorm -> BatchNorm1d, which keeps a counter (unused in eval mode)
        for i in range(m["layers"] - 1):
            out[f"norms.{i}.num_batches_tracked"] = torch.zeros((), dtype=torch.long)
    kwargs = {"in_channels": config["in_channels"], "hidden_channels": m["hidden"], "num_layers": m["layers"],
              "out_channels": config["out_channels"], "node_types": list(h.node_types),
              "relations": list(h.relations), "featured": list(h.featured), "embedding_rows": rows,
              "num_bases": m.get("num_bases", 0), "norm": norm}
    missing, unexpected = getattr(pyg_twins, twin)(**kwargs).load_state_dict(out, strict=False)
    if missing or unexpected:
        raise UserError(f"{path} does not hold --model {m['model']}'s weights as its config builds them (missing "
                        f"{', '.join(missing) or 'none'}; unexpected {', '.join(unexpected) or 'none'})")
    return {"module": "gnndist.pyg_twins", "model": twin, "kwargs": kwargs, "state_dict": out}


def link_file(state: dict, config: dict, path: Path) -> dict:
    """A link predictor's ``--format pyg`` contents: its encoder's twin (as :func:`pyg_file` writes a node model's),
    its decoder (``{"kind": "dot"}``, or ``"mlp"`` with the state dict of OGB's ``LinkPredictor(d, d, 1, 3, 0.0)``,
    whose names it has) and its learned input rows (``embedding`` in dataset order: a featureless graph's ``[N, in]``,
    or ``[N, hidden]`` beside the features where ``embedding_beside``; else None)."""
    def part(prefix: str) -> dict:
        return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}

    encoder = pyg_file(part("encoder."), {**config, "task": {**config["task"], "task": "node"}}, path)
    kind = config["task"]["decoder"]
    rows = state.get("embedding.weight")
    beside = rows is not None and rows.shape[1] != config.get("in_channels")  # else the rows are the whole input
    return {**encoder, "task": "link", "decoder": {"kind": kind, "state_dict": part("decoder.")},
            "embedding": rows, "embedding_beside": beside}


def pyg_file(state: dict, config: dict, path: Path) -> dict:
    """The ``--format pyg`` contents for the checkpoint's model, or one line when it has no exact PyG twin."""
    from gnndist.nn.models import model_spec
    from gnndist.training.checkpoint import check_same_model

    if config.get("task", {}).get("task") == "link":
        return link_file(state, config, path)
    m = config["model"]
    name, norm, plain = m["model"], m.get("norm", "none"), m.get("arch", "plain") == "plain"
    spec = model_spec(name)
    module, twin = spec.twin.rsplit(".", 1) if spec.twin and plain else (None, None)
    f_in, f_out, edge_dim = config.get("in_channels"), config.get("out_channels"), config.get("edge_dim", 0)
    if not f_in or not f_out:
        raise UserError(f"{path} does not record the model's widths (a ckpt-*.pt): export its run's best.pt")
    base = {"format": "pyg", "normalize_features": m.get("normalize_features", True), "checkpoint": str(path),
            "edge_weights": m.get("edge_weights", False)}  # True: call the twin with the graph's edge_weight
    if spec.hetero:
        if twin is None:
            raise UserError(f"--format pyg: --model {name} has no PyG twin (it is built from the typed graph's "
                            f"relations and embedding table): export it with --format gnndist")
        return {**base, **_hetero_file(twin, state, config, path)}
    if spec.edge_features and not edge_dim:
        raise UserError(f"{path} does not record the width of the edge features --model {name} reads (written "
                        f"before 2026-12-01): export it with --format gnndist, or train again")
    bias = m.get("bias", True)
    model = spec.build(f_in, m["hidden"], f_out, m["layers"], 0.0, norm, arch=m.get("arch", "plain"),
                       edge_dim=edge_dim, bias=bias)
    check_same_model(path, {"model": state, "config": config}, model)
    unwrapped, layers = _unwrapped(model, state, own_layers=twin is not None)
    kwargs = {"in_channels": f_in, "hidden_channels": m["hidden"], "num_layers": m["layers"], "out_channels": f_out}
    if module == BASIC:
        if twin == "GIN" and norm != "none":
            raise UserError(f"--format pyg: PyG's GIN puts --norm {norm} inside every layer's MLP, gnndist's GIN "
                            f"between the layers, so it has no exact twin with a norm: use --format gnndist")
        kwargs.update({} if bias else {"bias": False})  # PyG's BasicGNN hands it to every conv
        return {**base, "module": module, "model": twin, "kwargs": {**kwargs, **PYG_NORMS[norm]},
                "state_dict": _basic_state(twin, unwrapped, norm)}
    if twin is not None:
        if twin == "GCNII":
            kwargs.update(alpha=model.convs[0].alpha, theta=model.convs[0].theta)
        else:
            kwargs.update(norm=norm, **({"edge_dim": edge_dim} if spec.edge_features else {}))
        return {**base, "module": module, "model": twin, "kwargs": kwargs, "state_dict": unwrapped}
    return {**base, "module": None, "model": None, "gnndist_model": name, "layers": layers,
            "state_dict": unwrapped}


def export(checkpoint: str, out: str, fmt: str = "gnndist", force: bool = False) -> dict:
    """Write the model of ``checkpoint`` to ``out`` (atomically); returns what was written, for the report."""
    from gnndist.training.checkpoint import atomic_save, load_model_file

    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    target = Path(out)
    if target.is_dir():
        raise UserError(f"--out {target} is a folder: give the file to write (e.g. {target / 'model.pt'})")
    if target.exists() and not force:
        raise UserError(f"--out {target} exists: pass --force to replace it")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"--out {target}: {folder} is not a writable folder")
    state, config, path = load_model_file(checkpoint)
    m, f_in, f_out = config["model"], config.get("in_channels"), config.get("out_channels")
    if fmt == "gnndist":
        kept = {k: config[k] for k in config if k not in ("in_channels", "out_channels", "edge_dim", "hetero")}
        obj = {"format": "gnndist-model", "state_dict": state, "config": kept, "in_channels": f_in,
               "out_channels": f_out, "edge_dim": config.get("edge_dim", 0), "checkpoint": str(path),
               **({"hetero": config["hetero"]} if "hetero" in config else {})}
    else:
        obj = pyg_file(state, config, path)
    try:
        atomic_save(obj, target)
    except OSError as e:
        raise UserError(f"cannot write {target}: {e.strerror or e}") from None
    return {"out": str(target), "format": fmt, "model": m["model"], "in_channels": f_in, "out_channels": f_out,
            "parameters": int(sum(v.numel() for v in state.values())), "checkpoint": str(path)}
