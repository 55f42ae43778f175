"""The public sources of the registered datasets: one row each (:func:`source`), read by :mod:`.download`.

A row holds each file's URL, where it goes under the data root, its sha256 and size where known, the licence and
the citation. OGB's rows take the URL, the version and the folder inside the zip from the installed ``ogb``
package's own ``master.csv``. docs/downloads.md has the table.
"""

from __future__ import annotations

import os.path as osp
from dataclasses import dataclass


@dataclass(frozen=True)
class Remote:
    """One published file and where it goes under the data root.

    Args:
        url: where the file is published.
        path: under the data root, ``/``-separated: the file itself; for a zip (``member`` set), the folder it
            unpacks into.
        sha256: the file's hash where known (checked), else None.
        size: the file's bytes where known (checked), else None: the server's Content-Length is checked.
        member: a zip's top folder that becomes ``path`` (OGB's ``download_name``); None: a plain file.
    """

    url: str
    path: str
    sha256: str | None = None
    size: int | None = None
    member: str | None = None


@dataclass(frozen=True)
class Source:
    """A registered dataset's public source: its files, their licence and what to cite."""

    files: tuple[Remote, ...]
    licence: str
    citation: str

    @property
    def folder(self) -> str:
        """The dataset's folder directly under the data root (its lock file sits beside it)."""
        return self.files[0].path.split("/")[0]


# ---------------------------------------------------------------- the table

GITHUB = "https://github.com"
MUSAE_RAW = f"{GITHUB}/benedekrozemberczki/MUSAE/raw/master/input"
MUSAE_REMOTE = {"facebook_edges.csv": "edges", "facebook_target.csv": "target", "facebook.json": "features"}
FB100_RAW = f"{GITHUB}/CUAI/Non-Homophily-Large-Scale/raw/master/data/facebook100/Cornell5.mat"

# path under the data root -> (sha256, bytes): the files that the team's offline copies (shared/data/README.md, each
# copied byte for byte from the repository these URLs name) hold; every other file is checked by its size and format
KNOWN: dict[str, tuple[str, int]] = {
    "Cora/raw/ind.cora.allx": ("9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543", 257305),
    "Cora/raw/ind.cora.ally": ("2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71", 47959),
    "Cora/raw/ind.cora.graph": ("58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d", 59847),
    "Cora/raw/ind.cora.test.index": ("297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875", 5000),
    "Cora/raw/ind.cora.tx": ("b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a", 148025),
    "Cora/raw/ind.cora.ty": ("41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad", 28135),
    "Cora/raw/ind.cora.x": ("23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab", 22119),
    "Cora/raw/ind.cora.y": ("94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1", 4054),
    "PubMed/raw/ind.pubmed.ally": ("0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e", 224739),
    "PubMed/raw/ind.pubmed.graph": ("5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9", 471808),
    "PubMed/raw/ind.pubmed.test.index": ("b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5", 6000),
    "PubMed/raw/ind.pubmed.tx": ("4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d", 405505),
    "PubMed/raw/ind.pubmed.ty": ("ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd", 12135),
    "PubMed/raw/ind.pubmed.x": ("fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33", 23172),
    "PubMed/raw/ind.pubmed.y": ("e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3", 854),
    "blogcatalog/blogcatalog.npz": ("115be8c3396ae7db96c60df578c8c24ee46d2547ca62fa538ec9852c338df6c6", 1426499),
    "flickr_ane/flickr.npz": ("8eebe3fa74d66818d1977af8e13f8697b9710a4485b43ef5cbea305ce2eabc6a", 1280230),
    "dblp/dblp.npz": ("e1c460c864735b88158e230e715715b08a8f7bb7c94f7f6c3b5efc412558877d", 727093),
    "minesweeper/minesweeper.npz": ("e664c8dacf1e8ac466c2c09ed4b237bd2c5541f47a6eae9c6092cb87f16412b3", 135045),
    "chameleon_filtered/chameleon_filtered.npz": (
        "bf46f07e1fb5249280447e5fe3100f3e82fc4b93ad1e13ffcfdec924b6ac0bb5", 58924),
    "squirrel_filtered/squirrel_filtered.npz": (
        "f06370ffb3116c5de8b7a600005400b2293c025e0ce2f6916d8201a825505ac7", 208215),
    "chameleon/chameleon.npz": ("4c640bd2877fc4f9f101531e2f977bc16445a54e09a5cb01178df608e552f3fd", 177840),
    "squirrel/squirrel.npz": ("d436e3b42c0546b105241c0ab0766097074e68e55f67b133eeb9b0162e55cbd9", 704277),
    "actor/actor.npz": ("c350eef06b2c2a9bf8218be2b57cac6d4003d0922eb597a039e9123f75817816", 252956),
    "cornell/cornell.npz": ("684c54ba3daa13b0ba1f04a3d6dd1b1175c1ae9bdeb982851fd4ff96d3aac298", 30515),
    "texas/texas.npz": ("b164b99e6c3d43e4ab07488ec59bd8c815f90cbc1bd4cf425ce587d2b534d844", 28586),
    "wisconsin/wisconsin.npz": ("2543c89838cfc75f737f7c4664cc1d097f8268602c20b2d1bd4f21407df9c074", 41672),
    "facebook_page_page/facebook.json": ("ea870537646a93642a0008d38aa9bfeff02018070ba97b1f3f469d9622626436", 2088766),
    "facebook_page_page/facebook_edges.csv": (
        "7c50d8f02a75cc0829577814a1fc14535164daa38d79c3612340c9e9cdbd4022", 1882610),
    "facebook_page_page/facebook_target.csv": (
        "7bd96eafea3c2ca40f44bfa9e73642194696c21e38c7b29ed409c32ad14075cd", 1177912),
    "fb100_cornell5/Cornell5.mat": ("d9ff76ae34e855cb77b0779a3a320f7f73f848901cb13352e2734c17804c4aec", 3543757),
    "snap_email_enron/email-enron.jlg": ("aa8777b645800c4937ce3a39270e0da004478aa528aad9c9d305f76e900009c4", 512462),
    "snap_soc_slashdot0902/soc-slashdot0902-undirected.jlg": (
        "5e9d06049c187f07833739edc9f6b538b39724f4a80d4504659c54ec1ada21ca", 1976497),
    "snap_ego_twitter/ego-twitter-undirected.jlg": (
        "7f81dda501ad839152246ff328db8108d84b9646534a7236726e8f7e62ef6d11", 3366507),
    "snap_arxiv_cit/arxiv-cit-hep-ph.jlg": (
        "817dfd8b3c98ee4eee1e1ff5e98986e49fe9727ec233436915ec7f254a2e9684", 1245675),
    "snap_ca_astroph/astro-ph-cc1.jlg": ("f29be53e9f5e66a87fbb0e202515987f449d7b3e26559004bf9be06487a21278", 561920),
    "snap_ca_condmat/ca-condmat-cc1.jlg": ("4b113f85cf69244cd467136952f493330d006b645d94c0c8510108642f0c57c1", 279992),
    "snap_as_caida/as-caida20071105.jlg": ("10cb0f45dcf3f515c68709e08fbb2cc4cf228c8e50553ab4b78255099aa195a4", 190017),
    "snap_facebook_combined/facebook-combined.jlg": (
        "fd6c75b604c81d2bc17542423e5198e2b099f5dc648f9612ad0de8e7e227c4e6", 218302),
}

OGB_CITATION = "Hu et al., Open Graph Benchmark: Datasets for Machine Learning on Graphs, NeurIPS 2020"
# the licences ogb.stanford.edu gives each dataset
OGB_LICENCES = {
    "ogbn-arxiv": "ODC-BY", "ogbn-products": "Amazon license", "ogbn-proteins": "CC-0",
    "ogbn-papers100M": "ODC-BY", "ogbn-mag": "ODC-BY",
    "ogbl-collab": "ODC-BY", "ogbl-ddi": "CC-0", "ogbl-ppa": "CC-0", "ogbl-citation2": "ODC-BY",
}  # fmt: skip


def _remote(url: str, path: str) -> Remote:
    """A plain file, with its hash and size where :data:`KNOWN` has them."""
    sha, size = KNOWN.get(path, (None, None))
    return Remote(url, path, sha, size)


def _table() -> dict[str, Source]:
    """Every source but OGB's (whose rows :func:`source` reads from ``master.csv``), from the loaders' names and URLs
    (imported here: fetching a given `Source` needs neither torch nor the loaders)."""
    from . import npz, planetoid, snap, social

    table = {}
    for name, cls in planetoid.PLANETOID.items():
        table[name] = Source(
            tuple(_remote(f"{planetoid.URL}/ind.{name}.{k}", f"{cls}/raw/ind.{name}.{k}") for k in planetoid.SUFFIXES),
            "MIT (kimiyoung/planetoid); the LINQS data have no licence of their own",
            "Yang, Cohen & Salakhutdinov, Revisiting Semi-Supervised Learning with Graph Embeddings, ICML 2016; "
            "Sen et al., Collective Classification in Network Data, AI Magazine 2008")
    for name, (_, cls, file, _) in npz.SHCHUR.items():
        table[name] = Source(
            (_remote(f"{npz.SHCHUR_URL}/{file}", f"{cls}/raw/{file}"),), "MIT (shchur/gnn-benchmark)",
            "Shchur et al., Pitfalls of Graph Neural Network Evaluation, 2018"
            + ("; McAuley et al., Image-based Recommendations on Styles and Substitutes, SIGIR 2015"
               if name.startswith("amazon") else ""))
    gallery_cite = {"dblp": "Bojchevski & Guennemann, Deep Gaussian Embedding of Graphs, ICLR 2018"}
    for name, path in npz.GALLERY.items():
        table[name] = Source(
            (_remote(f"{npz.GALLERY_URL}/{osp.basename(path)}", path),), "MIT (EdisonLeeeee/GraphData)",
            gallery_cite.get(name, "Huang, Li & Hu, Accelerated Attributed Network Embedding, SDM 2017"))
    for name in npz.HETEROPHILY:
        stem = name.replace("-", "_")
        table[name] = Source(
            (_remote(f"{npz.HETEROPHILY_URL}/{stem}.npz", f"{stem}/{stem}.npz"),),
            "MIT (yandex-research/heterophilous-graphs)",
            "Platonov et al., A critical look at the evaluation of GNNs under heterophily, ICLR 2023")
    for name, path in snap.SNAP.items():
        table[name] = Source(
            (_remote(f"{snap.SNAP_URL}/{snap.SNAP_REMOTE[name]}", path),),
            "MIT (JuliaGraphs/SNAPDatasets.jl); the graphs are SNAP's",
            "Leskovec & Krevl, SNAP Datasets: Stanford Large Network Dataset Collection, 2014")
    table["facebook-page-page"] = Source(
        tuple(_remote(f"{MUSAE_RAW}/{MUSAE_REMOTE[f]}/{f}", f"facebook_page_page/{f}") for f in social.MUSAE_FILES),
        "GPL-3.0 (benedekrozemberczki/MUSAE)",
        "Rozemberczki, Allen & Sarkar, Multi-scale Attributed Node Embedding, Journal of Complex Networks 2021")
    table["fb100-cornell5"] = Source(
        (_remote(FB100_RAW, "fb100_cornell5/Cornell5.mat"),), "no licence file (CUAI/Non-Homophily-Large-Scale)",
        "Traud, Mucha & Porter, Social structure of Facebook networks, Physica A 2012")
    return table


def source(name: str) -> Source | None:
    """The public source of the registered dataset ``name`` (lower case), or None where it has none."""
    official = {n.lower(): n for n in OGB_LICENCES}.get(name)
    if official is None:
        return _table().get(name)
    from . import ogb, ogbl

    meta = (ogb._master if official.startswith("ogbn-") else ogbl._master)(official)
    zipped = Remote(meta["url"], official.replace("-", "_"), member=meta["download_name"])
    return Source((zipped,), OGB_LICENCES[official], OGB_CITATION)
