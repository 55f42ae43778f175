"""Registered datasets download themselves: the one table of their public sources, and `fetch`, which brings one
dataset into the data root.

    fetch(name, root, missing)   # the registry calls it when a loader raised MissingFiles, then loads again

Every registered dataset with a public source has a row (:func:`source`): each file's URL, where it goes under the
data root, its sha256 and size where known, the licence and the citation. OGB's rows take the URL, the version and
the folder inside the zip from the installed ``ogb`` package's own ``master.csv``. A download:

1. refuses at once under ``GNNDIST_OFFLINE=1``: one line, the loader's missing-file message and the URL;
2. takes an exclusive ``fcntl.flock`` on ``<root>/.<folder>.lock``, beside the dataset's folder: of the processes
   sharing a data root (the ranks of a machine under torchrun; every machine, where the root is on a shared file
   system whose locks reach across hosts), one downloads while the others wait, then find the files in place;
3. streams each file into a hidden sibling of its target, with a progress bar on a terminal (bytes, rate), else a
   line per stage;
4. checks it: the size (the table's, else the server's Content-Length), the sha256 where the table has one, else
   the archive's own integrity (a zip's CRCs, a gzip's stream);
5. renames it into place (a zip: unpacked into a hidden sibling folder that is renamed into place), so a killed
   download leaves no target, only hidden siblings, which the next download removes under the lock;
6. prints the source's licence and citation.

``GNNDIST_MIRROR=http://HOST:PORT`` replaces the scheme and host of every URL and keeps its path (mirrors,
air-gapped clusters, tests). Both variables are the user's, read here where they are used (as ``$GNNDIST_DATA`` is
in :func:`gnndist.machine.data_root`). docs/downloads.md has the table of sources.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import os
import os.path as osp
import shutil
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from gnndist.errors import UserError, first_line
from gnndist.files import atomic_dir, atomic_file

MARKER = ".gnndist-download"  # written last into a folder unpacked from a zip: the folder is whole
TIMEOUT_S = 60  # a connection that stalls this long fails
_BLOCK = 1 << 20


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


# ---------------------------------------------------------------- fetching


def mirrored(url: str, mirror: str) -> str:
    """``url`` with its scheme and host replaced by ``mirror`` (``http://HOST:PORT[/prefix]``); itself without one."""
    if not mirror:
        return url
    if not mirror.startswith(("http://", "https://")):
        raise UserError(f"GNNDIST_MIRROR={mirror}: not an http://HOST:PORT or https://HOST address")
    parts = urllib.parse.urlsplit(url)
    return mirror.rstrip("/") + parts.path + (f"?{parts.query}" if parts.query else "")


def fetch(name: str, root: str, missing: str, src: Source | None = None, out: IO[str] | None = None) -> None:
    """Download the files of the registered dataset ``name`` that are not under ``root`` (see the module docstring).

    Args:
        name: a registered name (lower case).
        root: the data root.
        missing: the loader's missing-file message, which the refusals offline and on a network failure begin with
            (they name the file's URL and its path too).
        src: the dataset's row (default: :func:`source`'s).
        out: where the progress goes (default: stderr).

    Raises:
        UserError: one line, with nothing left under ``root`` but the lock file and the whole files already fetched:
            offline, no source, the network failed, a file is damaged (size, sha256, archive), no space.
    """
    src = src or source(name)
    out = out or sys.stderr
    if src is None:
        raise UserError(missing)
    mirror = os.environ.get("GNNDIST_MIRROR", "")
    urls = {f.path: mirrored(f.url, mirror) for f in src.files}
    todo = [f for f in src.files if not _present(root, f)] or list(src.files)
    offline = os.environ.get("GNNDIST_OFFLINE", "")
    if offline not in ("", "0"):
        more = f" (and {len(todo) - 1} more files)" if len(todo) > 1 else ""
        raise UserError(f"{missing}; GNNDIST_OFFLINE={offline}, so {urls[todo[0].path]}{more} is not downloaded "
                        f"to {osp.join(root, todo[0].path)}")
    with _locked(root, src.folder, name, out):
        todo = [f for f in src.files if not _present(root, f)]
        if not todo:  # another process fetched them while this one waited
            return
        for f in todo:
            _clear_leftovers(osp.join(root, f.path))
        for f in todo:
            _fetch_file(name, root, f, urls[f.path], missing, out)
    out.write(f"{name}: licence {src.licence}; cite {src.citation}\n")
    out.flush()


def _present(root: str, f: Remote) -> bool:
    """True when ``f`` is in place: the file, or the unpacked folder with its marker."""
    target = osp.join(root, f.path)
    return osp.isfile(osp.join(target, MARKER)) if f.member else osp.isfile(target)


@contextlib.contextmanager
def _locked(root: str, folder: str, name: str, out: IO[str]) -> Iterator[None]:
    """Hold an exclusive flock on ``<root>/.<folder>.lock``; a process that must wait says for whom, once."""
    lock = osp.join(root, f".{folder}.lock")
    try:
        os.makedirs(root, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise UserError(f"{name}: cannot download into {root} ({e.strerror}); set $GNNDIST_DATA to a writable "
                        "folder") from e
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "another process"
            out.write(f"{name}: waiting for {holder}, which is downloading it (lock {lock})\n")
            out.flush()
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{socket.gethostname()} pid {os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would let two processes lock two files)


def _clear_leftovers(target: str) -> None:
    """Remove the hidden siblings a killed download of ``target`` left (atomic_file's ``.tmp``, atomic_dir's
    ``.tmp-``/``.old-`` folders, a zip's ``.download-`` folder); called under the lock."""
    parent, base = osp.split(target)
    if not osp.isdir(parent):
        return
    for entry in os.listdir(parent):
        if entry.startswith(f".{base}.") and (entry.endswith(".tmp") or any(
                tag in entry for tag in (".tmp-", ".old-", ".download-"))):
            path = osp.join(parent, entry)
            if osp.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


def _fetch_file(name: str, root: str, f: Remote, url: str, missing: str, out: IO[str]) -> None:
    """One file into place; on any failure the folders made for it are removed again."""
    target = osp.join(root, *f.path.split("/"))
    made = []  # the folders above target that this call makes, deepest first
    folder = osp.dirname(target)
    while not osp.isdir(folder):
        made.append(folder)
        folder = osp.dirname(folder)
    os.makedirs(osp.dirname(target), exist_ok=True)
    try:
        _fetch_into(name, target, f, url, missing, out)
    except BaseException:
        for folder in made:
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # only while empty
        raise


def _fetch_into(name: str, target: str, f: Remote, url: str, missing: str, out: IO[str]) -> None:
    """A plain file through a hidden sibling of ``target``; a zip unpacked through a hidden folder."""
    parent = osp.dirname(target)
    if f.member is None:
        with atomic_file(target, "wb") as fh:
            checked = _download(name, url, f, fh, target, missing, out)
            fh.flush()
            if f.sha256 is None:
                checked += _check_format(name, url, fh.name)
        out.write(f"{name}: {checked}\n")
        return
    staging = tempfile.mkdtemp(prefix=f".{osp.basename(target)}.download-", dir=parent)
    try:
        archive = osp.join(staging, osp.basename(urllib.parse.urlsplit(url).path) or "archive.zip")
        with open(archive, "wb") as fh:
            checked = _download(name, url, f, fh, target, missing, out)
        out.write(f"{name}: {checked}\n")
        _unzip(name, url, archive, f.member, target, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _download(name: str, url: str, f: Remote, fh: IO[bytes], target: str, missing: str, out: IO[str]) -> str:
    """Stream ``url`` into ``fh``; check its size and sha256; return what it got and what was checked."""
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "gnndist"}),
                                      timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        raise UserError(f"{missing}; downloading {url} failed: HTTP {e.code} {e.reason}") from e
    except urllib.error.URLError as e:
        reason = e.reason if isinstance(e.reason, str) else first_line(e.reason)
        raise UserError(f"{missing}; downloading {url} failed: {reason}") from e
    except OSError as e:  # a timeout before the answer
        raise UserError(f"{missing}; downloading {url} failed: {first_line(e)}") from e
    with resp:
        length = resp.headers.get("Content-Length", "")
        announced = int(length) if length.isdigit() else None
        expected = f.size if f.size is not None else announced
        _check_space(name, url, osp.dirname(target), expected)
        bar = _Progress(name, url, target, expected, out)
        digest, done = hashlib.sha256(), 0
        try:
            while block := resp.read1(_BLOCK):  # what has arrived, up to a MiB: the bar moves as bytes come
                fh.write(block)
                digest.update(block)
                done += len(block)
                bar.update(done)
        except (OSError, ValueError) as e:  # a reset connection, a timeout, http.client's IncompleteRead
            raise UserError(f"{name}: downloading {url} broke off after {done:,} bytes ({type(e).__name__}: "
                            f"{first_line(e)}); nothing was kept, the next run downloads it again") from e
        got = bar.finish(done)
    damaged = f"{name}: {url} is damaged"
    kept = "nothing was kept, the next run downloads it again"
    if announced is not None and done != announced:
        raise UserError(f"{damaged}: got {done:,} of the {announced:,} bytes the server announced; {kept}")
    if f.size is not None and done != f.size:
        raise UserError(f"{damaged}: {done:,} bytes, expected {f.size:,}; {kept}")
    if f.sha256 is not None and digest.hexdigest() != f.sha256:
        raise UserError(f"{damaged}: sha256 {digest.hexdigest()}, expected {f.sha256}; {kept}")
    if f.sha256 is not None:
        return f"{got}, sha256 checked"
    if f.size is not None:
        return f"{got}, size checked ({done:,} bytes)"
    if announced is not None:
        return f"{got}, size checked against Content-Length ({done:,} bytes)"
    return f"{got} (no size known to check)"


def _check_space(name: str, url: str, folder: str, need: int | None) -> None:
    """A one-line refusal when ``folder``'s file system has less than ``need`` bytes free."""
    free = shutil.disk_usage(folder).free
    if need is not None and need > free:
        raise UserError(f"{name}: not enough space for {url} in {folder}: it needs {_size(need)}, "
                        f"{_size(free)} free")


def _check_format(name: str, url: str, path: str) -> str:
    """Read a zip (``.npz``, ``.zip``) or gzip (``.gz``, ``.jlg``) through, so a damaged one fails here; what was
    checked."""
    kept = "nothing was kept, the next run downloads it again"
    try:
        if url.endswith((".npz", ".zip")):
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
            if bad is not None:
                raise UserError(f"{name}: {url} is damaged: {bad} fails its CRC; {kept}")
            return ", zip CRCs checked"
        if url.endswith((".gz", ".jlg")):
            with gzip.open(path, "rb") as g:
                while g.read(_BLOCK):
                    pass
            return ", gzip stream checked"
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as e:
        raise UserError(f"{name}: {url} is damaged ({type(e).__name__}: {first_line(e)}); {kept}") from e
    return ""


def _unzip(name: str, url: str, archive: str, member: str, target: str, out: IO[str]) -> None:
    """Unpack the folder ``member`` of the zip at ``archive`` as ``target``: atomically, each file's CRC checked as
    it is read (a damaged archive fails before ``target`` exists), the marker written last."""
    kept = "nothing was kept, the next run downloads it again"
    prefix = member.rstrip("/") + "/"
    try:
        with zipfile.ZipFile(archive) as z:
            infos = [i for i in z.infolist() if i.filename.startswith(prefix) and not i.is_dir()]
            if not infos:
                raise UserError(f"{name}: {url} holds no folder {prefix} (OGB's download_name); {kept}")
            _check_space(name, url, osp.dirname(target), sum(i.file_size for i in infos))
            with atomic_dir(target) as tmp:
                for info in infos:
                    rel = osp.normpath(info.filename[len(prefix):])
                    if rel.startswith("..") or osp.isabs(rel):
                        raise UserError(f"{name}: {url} holds {info.filename}, outside {prefix}; {kept}")
                    dest = osp.join(tmp, rel)
                    os.makedirs(osp.dirname(dest), exist_ok=True)
                    with z.open(info) as src, open(dest, "wb") as dst:
                        shutil.copyfileobj(src, dst, _BLOCK)
                with open(osp.join(tmp, MARKER), "w") as m:
                    m.write(f"{url}\n")
    except (zipfile.BadZipFile, EOFError, zlib.error) as e:
        raise UserError(f"{name}: {url} is damaged ({type(e).__name__}: {first_line(e)}); {kept}") from e
    out.write(f"{name}: unpacked {len(infos)} files of {prefix} into {target}, zip CRCs checked\n")


def _size(n: int) -> str:
    """Bytes for people: ``812 B``, ``12.3 KiB``, ``81.0 MiB``, ``56.2 GiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


class _Progress:
    """A download's progress: a line when it starts, then on a terminal a bar redrawn in place (bytes, rate) and
    wiped at the end, where the caller says what it got and checked."""

    def __init__(self, name: str, url: str, target: str, total: int | None, out: IO[str]):
        self.name, self.total, self.out = name, total, out
        self.tty = hasattr(out, "isatty") and out.isatty()
        self.t0 = self.shown = time.monotonic()
        size = f" ({_size(total)})" if total is not None else ""
        out.write(f"{name}: downloading {url}{size} to {target}\n")
        out.flush()

    def _line(self, done: int) -> str:
        rate = done / max(time.monotonic() - self.t0, 1e-9)
        of = f" / {_size(self.total)} ({100 * done / max(self.total, 1):.0f}%)" if self.total else ""
        return f"{self.name}: {_size(done)}{of}, {_size(int(rate))}/s"

    def update(self, done: int) -> None:
        now = time.monotonic()
        if self.tty and now - self.shown >= 0.2:
            self.shown = now
            self.out.write("\r" + self._line(done) + "\033[K")
            self.out.flush()

    def finish(self, done: int) -> str:
        """What it got, for the line that says what was checked (on a terminal, the bar is wiped for it)."""
        if self.tty:
            self.out.write("\r\033[K")
        seconds = time.monotonic() - self.t0
        return f"got {_size(done)} in {seconds:.1f} s ({_size(int(done / max(seconds, 1e-9)))}/s)"
