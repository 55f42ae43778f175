"""Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG, public split."""

from __future__ import annotations

import os
import os.path as osp
from importlib import resources

from torch_geometric.data import Data
from torch_geometric.datasets import Planetoid
from torch_geometric.io import read_planetoid_data

from gnndist.errors import UserError

from .graph import clean_edges, make_data
from .root import MissingFiles

PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
URL = "https://github.com/kimiyoung/planetoid/raw/master/data"


def bundled_dir(name: str) -> str | None:
    """Folder of the raw files shipped inside the package, or None."""
    path = str(resources.files("gnndist.datasets") / "bundled" / name)
    return path if has_raw(path, name) else None


def has_raw(folder: str, prefix: str) -> bool:
    """True when every ``ind.<prefix>.*`` file is in ``folder``."""
    return all(osp.isfile(osp.join(folder, f"ind.{prefix}.{s}")) for s in SUFFIXES)


def detect_prefix(folder: str) -> str | None:
    """The ``<name>`` of ``ind.<name>.graph`` in ``folder``, or None."""
    for f in sorted(os.listdir(folder)):
        if f.startswith("ind.") and f.endswith(".graph"):
            return f[len("ind.") : -len(".graph")]
    return None


def load_planetoid(name: str, root: str) -> Data:
    """Load ``cora``/``citeseer``/``pubmed`` from ``root/<Name>/raw`` (PyG's layout).

    A plain ``root/<name>/ind.<name>.*`` folder also works. Cora falls back to the copy bundled with the package.
    When the files are missing this raises `MissingFiles` naming the folder and the URL (the registry then
    downloads them into ``root/<Name>/raw``).
    """
    cls_name = PLANETOID[name]
    raw = osp.join(root, cls_name, "raw")
    if has_raw(raw, name):
        ds = Planetoid(root, cls_name, split="public")
        return _finish(ds[0], name)
    for folder in (
        osp.join(root, name),
        bundled_dir(name),
    ):  # plain folder, then bundle
        if folder is not None and has_raw(folder, name):
            return load_planetoid_folder(folder, name)
    missing = [s for s in SUFFIXES if not osp.isfile(osp.join(raw, f"ind.{name}.{s}"))]
    raise MissingFiles(
        f"{name}: missing raw files {', '.join(f'ind.{name}.{s}' for s in missing)} in {raw}; "
        f"get them from {URL}/ind.{name}.<x|tx|allx|y|ty|ally|graph|test.index> "
        f'(or run: python -c "from torch_geometric.datasets import Planetoid; '
        f"Planetoid('{root}', '{cls_name}')\" on a machine with internet)"
    )


def load_planetoid_folder(
    folder: str, prefix: str | None = None, name: str | None = None
) -> Data:
    """Load a folder of raw ``ind.<prefix>.*`` files with PyG's reader (public split).

    Shapes:
        x: [N, F] float32; y: [N]; edge_index: [2, E] symmetric, no self-loops.
    """
    prefix = prefix or detect_prefix(folder)
    if prefix is None:
        raise UserError(
            f"{folder}: no ind.<name>.graph file, not a Planetoid raw folder"
        )
    missing = [
        s for s in SUFFIXES if not osp.isfile(osp.join(folder, f"ind.{prefix}.{s}"))
    ]
    if missing:
        raise UserError(
            f"{folder}: Planetoid folder lacks {', '.join(f'ind.{prefix}.{s}' for s in missing)}"
            f"; get them from {URL}"
        )
    try:
        data = read_planetoid_data(folder, prefix)
    except Exception as e:  # pickles from elsewhere fail in many ways
        raise UserError(
            f"{folder}: cannot read Planetoid files ({type(e).__name__}: {e})"
        ) from e
    return _finish(data, name or prefix)


def _finish(raw: Data, name: str) -> Data:
    """Clean the edges and set the contract's attributes on PyG's Planetoid `Data`."""
    n = raw.num_nodes
    ei = clean_edges(raw.edge_index[0].numpy(), raw.edge_index[1].numpy(), n)
    data = make_data(raw.x, raw.y, ei, name)
    data.train_mask, data.val_mask, data.test_mask = (
        raw.train_mask,
        raw.val_mask,
        raw.test_mask,
    )
    return data
