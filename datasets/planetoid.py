"""Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG, public split."""

from __future__ import annotations

import os
import os.path as osp
from importlib import resources
from typing import TYPE_CHECKING

from gnndist.errors import UserError

from .graph import clean_edges, make_data
from .root import MissingFiles
from .spec import Remote, register, register_format

if TYPE_CHECKING:
    from torch_geometric.data import Data

PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
URL = "https://github.com/kimiyoung/planetoid/raw/master/data"
# name -> suffix -> (sha256, bytes) of the raw files the team's offline copies hold (shared/data/README.md, each
# copied byte for byte from URL); the others are checked by their size and format
HASHES = {
    "cora": {
        "allx": ("9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543", 257305),
        "ally": ("2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71", 47959),
        "graph": ("58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d", 59847),
        "test.index": ("297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875", 5000),
        "tx": ("b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a", 148025),
        "ty": ("41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad", 28135),
        "x": ("23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab", 22119),
        "y": ("94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1", 4054),
    },
    "pubmed": {
        "ally": ("0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e", 224739),
        "graph": ("5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9", 471808),
        "test.index": ("b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5", 6000),
        "tx": ("4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d", 405505),
        "ty": ("ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd", 12135),
        "x": ("fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33", 23172),
        "y": ("e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3", 854),
    },
}


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
    from torch_geometric.datasets import Planetoid

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
    from torch_geometric.io import read_planetoid_data

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


for _name, _cls in PLANETOID.items():
    register(_name, lambda name, root, seed: load_planetoid(name, root), files=tuple(
        Remote(f"{URL}/ind.{_name}.{k}", f"{_cls}/raw/ind.{_name}.{k}", *HASHES.get(_name, {}).get(k, (None, None)))
        for k in SUFFIXES),
        licence="MIT (kimiyoung/planetoid); the LINQS data have no licence of their own",
        citation="Yang, Cohen & Salakhutdinov, Revisiting Semi-Supervised Learning with Graph Embeddings, ICML 2016; "
                 "Sen et al., Collective Classification in Network Data, AI Magazine 2008",
        recipes={"link": "gae"})
register_format("planetoid", lambda path, name, seed: load_planetoid_folder(path),
                lambda path: osp.isdir(path) and detect_prefix(path) is not None)
