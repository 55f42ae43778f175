"""Edge lists: SNAP/Graphs.jl ``.jlg`` files and plain or gzipped text edge lists.

These graphs carry structure only. Features are ``[1, log(1 + degree)]`` and every
label is 0 with ``num_classes = 1`` and ``data.has_labels = False``: training on them
measures speed and communication, never accuracy. Directed graphs are symmetrised.
"""

from __future__ import annotations

import gzip
import os.path as osp
import re
from typing import TYPE_CHECKING

import numpy as np
import torch

from gnndist.errors import UserError

from .graph import clean_edges, make_data
from .root import registered_file
from .spec import Remote, register, register_format
from .split import set_random_split

if TYPE_CHECKING:
    from torch_geometric.data import Data

JLG_HEADER = re.compile(r"^\s*(\d+)\s*,\s*(\d+)\s*,\s*([ud])\s*(,.*)?$")
SNAP_URL = "https://github.com/JuliaGraphs/SNAPDatasets.jl/raw/master/data"
# name -> file under root (the layout of /work/shared/data)
SNAP = {
    "email-enron": "snap_email_enron/email-enron.jlg",
    "soc-slashdot0902": "snap_soc_slashdot0902/soc-slashdot0902-undirected.jlg",
    "ego-twitter": "snap_ego_twitter/ego-twitter-undirected.jlg",
    "cit-hepph": "snap_arxiv_cit/arxiv-cit-hep-ph.jlg",
    "ca-astroph": "snap_ca_astroph/astro-ph-cc1.jlg",
    "ca-condmat": "snap_ca_condmat/ca-condmat-cc1.jlg",
    "as-caida": "snap_as_caida/as-caida20071105.jlg",
    "ego-facebook": "snap_facebook_combined/facebook-combined.jlg",
}
# name -> its file under SNAP_URL (SNAPDatasets.jl's data/ folder: the hint's and the download's URL)
SNAP_REMOTE = {
    "email-enron": "email-enron/email-enron.jlg",
    "soc-slashdot0902": "soc-slashdot0902/soc-slashdot0902-undirected.jlg",
    "ego-twitter": "ego-twitter/ego-twitter-undirected.jlg",
    "cit-hepph": "arxiv_cit/arxiv-cit-hep-ph.jlg",
    "ca-astroph": "ca-astroph/astro-ph-cc1.jlg",
    "ca-condmat": "ca-condmat/ca-condmat-cc1.jlg",
    "as-caida": "as-caida/as-caida20071105.jlg",
    "ego-facebook": "facebook-combined/facebook-combined.jlg",
}
# name -> (sha256, bytes) of its file, as the team's offline copies hold it (shared/data/README.md, each copied byte
# for byte from SNAP_URL)
HASHES = {
    "email-enron": ("aa8777b645800c4937ce3a39270e0da004478aa528aad9c9d305f76e900009c4", 512462),
    "soc-slashdot0902": ("5e9d06049c187f07833739edc9f6b538b39724f4a80d4504659c54ec1ada21ca", 1976497),
    "ego-twitter": ("7f81dda501ad839152246ff328db8108d84b9646534a7236726e8f7e62ef6d11", 3366507),
    "cit-hepph": ("817dfd8b3c98ee4eee1e1ff5e98986e49fe9727ec233436915ec7f254a2e9684", 1245675),
    "ca-astroph": ("f29be53e9f5e66a87fbb0e202515987f449d7b3e26559004bf9be06487a21278", 561920),
    "ca-condmat": ("4b113f85cf69244cd467136952f493330d006b645d94c0c8510108642f0c57c1", 279992),
    "as-caida": ("10cb0f45dcf3f515c68709e08fbb2cc4cf228c8e50553ab4b78255099aa195a4", 190017),
    "ego-facebook": ("fd6c75b604c81d2bc17542423e5198e2b099f5dc648f9612ad0de8e7e227c4e6", 218302),
}


def _open_text(path: str):
    """Open a text file, gunzipping when it starts with the gzip magic bytes."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt") if gz else open(path)


def _first_line(path: str) -> str:
    try:
        with _open_text(path) as f:
            return f.readline()
    except (OSError, UnicodeDecodeError, EOFError):
        return ""


def is_jlg(path: str) -> bool:
    """True when the first line is a Graphs.jl header ``nv,ne,u|d,name``."""
    return osp.isfile(path) and JLG_HEADER.match(_first_line(path)) is not None


def is_edge_list(path: str) -> bool:
    """True for a text file whose first data line holds two integer ids."""
    if not osp.isfile(path):
        return False
    try:
        header_seen = False
        with _open_text(path) as f:
            for _, line in zip(range(50), f, strict=False):
                line = line.strip()
                if not line or line[0] in "#%":
                    continue
                parts = re.split(r"[\s,;]+", line)
                if len(parts) >= 2 and all(p.lstrip("-").isdigit() for p in parts[:2]):
                    return True
                if header_seen:
                    return False
                header_seen = (
                    True  # one non-numeric line may be a header such as "id_1,id_2"
                )
    except (OSError, UnicodeDecodeError, EOFError):
        return False
    return False


def _structure_only(
    src: np.ndarray, dst: np.ndarray, n: int, name: str, seed: int
) -> Data:
    """`Data` for a graph without features or labels (see the module docstring)."""
    ei = clean_edges(src, dst, n)
    deg = torch.bincount(ei[0], minlength=n).to(torch.float32)
    x = torch.stack([torch.ones(n), torch.log1p(deg)], dim=1)  # [N, 2]
    data = make_data(x, torch.zeros(n, dtype=torch.int64), ei, name, num_classes=1)
    data.has_labels = False
    data.featureless = True  # x is made from the structure: a link predictor learns every node's row instead
    return set_random_split(data, seed=seed)


def read_jlg(path: str, name: str, seed: int = 0) -> Data:
    """Load a gzipped Graphs.jl ``.jlg`` file (header ``nv,ne,u|d,name``, 1-based ids).

    Shapes:
        x: [N, 2]; y: [N] zeros; edge_index: [2, E] symmetric.
    """
    header = JLG_HEADER.match(_first_line(path))
    if header is None:
        raise UserError(f"{path}: first line is not a .jlg header 'nv,ne,u|d,name'")
    import pandas as pd

    nv, ne = int(header.group(1)), int(header.group(2))
    try:
        with _open_text(path) as f:
            f.readline()
            e = pd.read_csv(
                f, header=None, sep=",", dtype=np.int64, nrows=ne
            ).to_numpy()
    except Exception as err:
        raise UserError(
            f"{path}: cannot parse edge lines ({type(err).__name__}: {err})"
        ) from err
    if e.ndim != 2 or e.shape[1] < 2:
        raise UserError(f"{path}: edge lines must be 'src,dst'")
    if e.shape[0] != ne:
        raise UserError(f"{path}: header says {ne} edges but the file has {e.shape[0]}")
    return _structure_only(e[:, 0] - 1, e[:, 1] - 1, nv, name, seed)


def read_edge_list(path: str, name: str, seed: int = 0) -> Data:
    """Load a text edge list (plain or gzipped; whitespace, comma or tab separated).

    Lines starting with ``#`` or ``%`` are comments; a non-numeric first line is a
    header. Ids are kept when they are dense (``max id + 1 <= 2 * distinct ids``),
    else they are relabelled to ``0..N-1`` and the original ids kept in ``data.node_ids``.
    """
    first = ""
    with _open_text(path) as f:
        for line in f:
            if line.strip() and line.lstrip()[0] not in "#%":
                first = line
                break
    sep = "," if "," in first else ("\t" if "\t" in first else r"\s+")
    has_header = not re.split(r"[\s,]+", first.strip())[0].lstrip("-").isdigit()
    import pandas as pd

    try:
        with _open_text(path) as f:
            df = pd.read_csv(f, sep=sep, header=0 if has_header else None, comment="#",
                             usecols=[0, 1], dtype=np.int64)  # fmt: skip
    except Exception as err:
        raise UserError(
            f"{path}: cannot parse edge list ({type(err).__name__}: {err})"
        ) from err
    e = df.to_numpy()
    if e.size == 0:
        raise UserError(f"{path}: edge list is empty")
    if e.min() < 0:
        raise UserError(f"{path}: edge ids out of range: negative id {int(e.min())}")
    ids = np.unique(e)
    if int(ids[-1]) + 1 <= 2 * ids.size:
        data = _structure_only(e[:, 0], e[:, 1], int(ids[-1]) + 1, name, seed)
    else:
        src, dst = np.searchsorted(ids, e[:, 0]), np.searchsorted(ids, e[:, 1])
        data = _structure_only(src, dst, ids.size, name, seed)
        data.node_ids = torch.from_numpy(ids)
    return data


def load_snap(name: str, root: str, seed: int = 0) -> Data:
    """A registered SNAP graph from ``root/<folder>/<file>.jlg``."""
    path = registered_file(name, root, SNAP[name], f"{SNAP_URL}/{SNAP_REMOTE[name]}")
    return read_jlg(path, name, seed)


for _name, _path in SNAP.items():
    register(_name, load_snap, files=(Remote(f"{SNAP_URL}/{SNAP_REMOTE[_name]}", _path, *HASHES[_name]),),
             licence="MIT (JuliaGraphs/SNAPDatasets.jl); the graphs are SNAP's",
             citation="Leskovec & Krevl, SNAP Datasets: Stanford Large Network Dataset Collection, 2014",
             featureless=True)
register_format("jlg", read_jlg, is_jlg)
register_format("edgelist", read_edge_list, is_edge_list, fallback=2)
