"""OGB link property prediction (``ogbl-collab``, ``ogbl-ddi``, ``ogbl-ppa``, ``ogbl-citation2``) through
`ogb.linkproppred.PygLinkPropPredDataset`, and `write_ogbl`, which saves any graph and `EdgeSplit` in that layout so
the path is tested offline.

A dataset lives in ``<root>/ogbl_<name>/`` (or ``ogbl_<name>_pyg/``) as OGB unzips it::

    RELEASE_v1.txt                        without it OGB prompts on stdin
    raw/edge.csv.gz                       the training edges, one row ``u,v`` each (OGB adds the reverse
                                          edges, except for citation2, which is directed)
    raw/num-node-list.csv.gz              ``N``;  raw/num-edge-list.csv.gz: the number of rows of edge.csv.gz
    raw/node-feat.csv.gz                  ``[N, F]`` (not ddi's)
    raw/edge_weight.csv.gz, edge_year     collab's, one row per edge;  raw/node_year.csv.gz: citation2's
    split/<kind>/{train,valid,test}.pt    ``kind`` from OGB's master.csv (collab ``time``, ddi ``target``, ppa
                                          ``throughput``, citation2 ``time``); torch.save'd dicts:
        collab    edge [n, 2], weight [n], year [n]; valid and test also edge_neg [m, 2]
        ddi, ppa  edge [n, 2]; valid and test also edge_neg [m, 2]
        citation2 source_node [n], target_node [n]; valid and test also target_node_neg [n, 1000]

The result is a link-prediction graph: ``edge_index`` the message graph (OGB's graph, the training edges, cleaned:
both directions, no duplicates, sorted), collab's ``edge_weight`` ``[E']`` (a pair's weights over its duplicate
rows summed, as OGB's sparse adjacency sums them: ``--edge-weights``), ``data.link`` the `EdgeSplit` (kind
``"ogb"``, OGB's ``Evaluator`` metric),
``y`` -1 (unlabelled) and ``num_classes = 0``, empty node masks. ddi has no node features: ``x`` is ``[N, 0]`` and
``data.featureless = True``, for the model to learn one embedding per node as OGB's ddi baselines do.

`PygLinkPropPredDataset`, not the plain `LinkPropPredDataset`: the plain one writes ``processed/data_processed``
without making ``processed/`` and with pickle protocol 4, which ``torch.load(weights_only=True)`` (torch >= 2.6)
cannot read back. OGB's processed file goes where :func:`.ogb._processing_folder` says: never into a folder outside
the data root.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import os.path as osp
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from gnndist.errors import UserError, first_line

from .edge_split import EdgeSplit, random_edge_split
from .graph import clean_edges, make_data, pyg_safe_globals, summed_weights
from .ogb import OGB_CITATION, _processing_folder, _write_csv, ogb_files, ogb_folder
from .spec import register

if TYPE_CHECKING:
    from torch_geometric.data import Data

# what ogb.stanford.edu gives each dataset: (licence, OGB's Evaluator's metric: tests/test_dataset_spec.py checks it)
OGBL = {
    "ogbl-collab": ("ODC-BY", "hits@50"), "ogbl-ddi": ("CC-0", "hits@20"), "ogbl-ppa": ("CC-0", "hits@100"),
    "ogbl-citation2": ("ODC-BY", "mrr"),
}  # fmt: skip
OGBL_NAMES = list(OGBL)
SPLIT_PARTS = ("train", "valid", "test")


def _canonical(name: str) -> str:
    """The official spelling of an ``ogbl-*`` name, or a `UserError` listing them."""
    known = {n.lower(): n for n in OGBL_NAMES}
    if name.lower() not in known:
        raise UserError(f"{name}: not an OGB link dataset; known: {', '.join(OGBL_NAMES)}")
    return known[name.lower()]


def _master(name: str) -> dict[str, str]:
    """OGB's own row of ``ogb/linkproppred/master.csv`` for ``name``."""
    import pandas as pd
    from ogb import linkproppred

    path = osp.join(osp.dirname(linkproppred.__file__), "master.csv")
    master = pd.read_csv(path, index_col=0, keep_default_na=False)
    return {k: str(v) for k, v in master[name].items()}


def _extra_files(meta: dict[str, str], kind: str) -> list[str]:
    """OGB's additional ``node`` or ``edge`` files of a dataset (``edge_weight``, ``node_year``, ...)."""
    files = meta[f"additional {kind} files"]
    return [] if files == "None" else files.split(",")


def _missing(folder: str, meta: dict[str, str]) -> list[str]:
    """Files OGB needs in ``folder`` that are missing (empty when it can load)."""
    need = []
    if not osp.isfile(osp.join(folder, "processed", "geometric_data_processed.pt")):
        need = ["raw/edge.csv.gz", "raw/num-node-list.csv.gz", "raw/num-edge-list.csv.gz"]
        if meta["has_node_attr"] == "True":
            need.append("raw/node-feat.csv.gz")
        need += [f"raw/{f}.csv.gz" for f in _extra_files(meta, "node") + _extra_files(meta, "edge")]
    need.append(f"RELEASE_v{meta['version']}.txt")  # without it OGB prompts on stdin
    need += [f"split/{meta['split']}/{part}.pt" for part in SPLIT_PARTS]
    return [f for f in need if not osp.exists(osp.join(folder, f))]


def load_ogbl(name: str, root: str, seed: int = 0) -> Data:
    """A registered ``ogbl-*`` dataset from ``root/ogbl_<name>/`` (OGB's layout), with OGB's split as ``data.link``.

    Missing files raise `MissingFiles` with the command that fetches them (the registry then downloads OGB's zip).
    ``seed`` is unused (the split is OGB's); it is the registry's loader signature.
    """
    name = _canonical(name)
    meta = _master(name)
    folder = ogb_folder(name, root, meta, _missing, "linkproppred import PygLinkPropPredDataset")
    from ogb.linkproppred import PygLinkPropPredDataset

    try:
        with contextlib.redirect_stdout(io.StringIO()), pyg_safe_globals():
            ds = PygLinkPropPredDataset(name, root=osp.dirname(_processing_folder(folder)))
            graph = ds[0]
    except Exception as e:
        raise UserError(f"{name}: OGB cannot load the files ({type(e).__name__}: {first_line(e)})") from e
    try:
        parts = ds.get_edge_split()
    except Exception as e:  # an unreadable split file
        raise UserError(f"{name}: cannot read split/{meta['split']} ({type(e).__name__}: {first_line(e)})") from e
    return _from_ogbl(graph, parts, name)


def _from_ogbl(graph: Data, parts: dict[str, dict[str, Tensor]], name: str) -> Data:
    """OGB's graph and split dicts as a link-prediction `Data` (see the module docstring)."""
    from ogb.linkproppred import Evaluator

    n = int(graph.num_nodes)
    featureless = graph.x is None
    x = torch.zeros(n, 0) if featureless else graph.x.to(torch.float32)  # [N, F]; ddi: [N, 0]
    ei = graph.edge_index.numpy()
    data = make_data(x, torch.full((n,), -1, dtype=torch.int64), clean_edges(ei[0], ei[1], n), name, num_classes=0)
    if "edge_weight" in graph:  # collab's, per listed edge: the message graph's weights
        data.edge_weight = summed_weights(data.edge_index, ei[0], ei[1], graph.edge_weight.numpy(), n)  # [E']
    none = torch.zeros(n, dtype=torch.bool)  # no node is labelled: the node masks are empty
    data.train_mask, data.val_mask, data.test_mask = none, none.clone(), none.clone()
    if featureless:
        data.featureless = True
    metric = Evaluator(name).eval_metric
    train, valid, test = (parts[p] for p in SPLIT_PARTS)
    if metric == "mrr":  # citation2: positives as (source, target), negatives as targets per positive
        pos = [torch.stack([d["source_node"], d["target_node"]], dim=1) for d in (train, valid, test)]  # [n, 2]
        neg = [valid["target_node_neg"], test["target_node_neg"]]  # [n, K]
    else:
        pos = [d["edge"] for d in (train, valid, test)]  # [n, 2]
        neg = [valid["edge_neg"], test["edge_neg"]]  # [m, 2]
    pos, neg = ([t.to(torch.int64) for t in ts] for ts in (pos, neg))
    data.link = EdgeSplit(*pos, *neg, metric=metric, kind="ogb", valid_as_input=name == "ogbl-collab",
                          train_weight=train.get("weight"))
    return data


def _write_split(folder: str, name: str, a: dict, weight: Tensor, year: Tensor, ones: dict,
                 per_positive: bool) -> None:
    """``{train,valid,test}.pt`` of ``split/<kind>/`` in ``name``'s dict form (``a``: the split's arrays)."""
    for part in SPLIT_PARTS:
        pos = a[part]  # [n, 2]
        if per_positive:
            out = {"source_node": pos[:, 0].contiguous(), "target_node": pos[:, 1].contiguous()}
        else:
            out = {"edge": pos}
        if name == "ogbl-collab":
            out["weight"] = weight if part == "train" else ones[part]
            out["year"] = year if part == "train" else ones[part]
        if part != "train":
            out["target_node_neg" if per_positive else "edge_neg"] = a[f"{part}_neg"]
        torch.save(out, osp.join(folder, f"{part}.pt"))


def write_ogbl(data: Data, root: str, name: str = "ogbl-collab", split: EdgeSplit | None = None, seed: int = 0,
               year: Tensor | None = None) -> str:
    """Save a graph and its link split in OGB's layout of ``name``, so `load_ogbl` (and OGB) read it offline.

    Writes ``<root>/<name with underscores>/``: ``raw/edge.csv.gz`` (the training positives, one row each),
    ``raw/num-{node,edge}-list.csv.gz``, ``raw/node-feat.csv.gz`` (when ``name`` has node features; 9 significant
    digits, which round-trip float32), the dataset's additional files (collab's ``edge_weight`` from
    ``split.train_weight`` else 1, ``edge_year`` from ``year`` else 1; citation2's ``node_year``, 1),
    ``split/<kind>/{train,valid,test}.pt`` in the dataset's dict form and ``RELEASE_v1.txt``.

    Args:
        data: a graph with ``x`` and ``edge_index`` (``num_nodes`` from ``x``).
        root: parent folder.
        name: which OGB dataset's layout (and so which metric the loader reports): one of ``OGBL_NAMES``.
        split: the pairs to write; default ``data.link``, else ``random_edge_split(data.edge_index, seed=seed)``.
        seed: seed of that random split.
        year: per training positive (collab's ``year``); default 1.

    Shapes:
        x: [N, F]; split.train: [E_train, 2]; year: [E_train]. citation2 needs per-positive negatives
        (``split.valid_neg`` [E_val, K]); the others shared pairs ([M, 2]).

    Returns:
        The dataset folder; ``load_ogbl(name, root)`` reads it.
    """
    name = _canonical(name)
    meta = _master(name)
    n = int(data.num_nodes)
    split = split if split is not None else (data.link if "link" in data else None)
    if split is None:
        split, _ = random_edge_split(data.edge_index, n, seed=seed)
    per_positive = meta["eval metric"] == "mrr"
    if split.per_positive != per_positive:
        raise UserError(f"{name} ranks each positive against {'its own' if per_positive else 'shared'} negatives; "
                        f"the split's metric {split.metric!r} has {'shared' if per_positive else 'per-positive'} ones")
    folder = osp.join(root, name.replace("-", "_"))
    raw, split_dir = osp.join(folder, "raw"), osp.join(folder, "split", meta["split"])
    os.makedirs(raw, exist_ok=True)
    os.makedirs(split_dir, exist_ok=True)
    a = {k: v.clone() for k, v in split.arrays().items() if k != "train_weight"}  # a view would save its base
    e_train = a["train"].size(0)
    ones = {p: torch.ones(a[p].size(0), dtype=torch.int64) for p in SPLIT_PARTS}
    weight = split.train_weight if split.train_weight is not None else ones["train"]  # [E_train]
    year = year if year is not None else ones["train"]  # [E_train]
    _write_csv(a["train"].numpy(), osp.join(raw, "edge.csv.gz"))
    _write_csv(np.array([[n]]), osp.join(raw, "num-node-list.csv.gz"))
    _write_csv(np.array([[e_train]]), osp.join(raw, "num-edge-list.csv.gz"))
    if meta["has_node_attr"] == "True":
        _write_csv(data.x.numpy(), osp.join(raw, "node-feat.csv.gz"), float_format="%.9g")
    extra = {"edge_weight": weight, "edge_year": year, "node_year": torch.ones(n, dtype=torch.int64)}
    for file in _extra_files(meta, "node") + _extra_files(meta, "edge"):
        _write_csv(extra[file].reshape(-1, 1).numpy(), osp.join(raw, f"{file}.csv.gz"))
    _write_split(split_dir, name, a, weight, year, ones, per_positive)
    with open(osp.join(folder, f"RELEASE_v{meta['version']}.txt"), "w") as f:
        f.write(f"written by gnndist.datasets.ogbl.write_ogbl in the layout of {name}\n")
    return folder


for _name, (_licence, _metric) in OGBL.items():  # link prediction: data.link holds OGB's split
    register(_name, load_ogbl, files=functools.partial(ogb_files, _master, _name), licence=_licence,
             citation=OGB_CITATION, task="link", metric=_metric, featureless=_name == "ogbl-ddi",
             recipes={"link": "ogbl-collab"} if _name == "ogbl-collab" else {})
