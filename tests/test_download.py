"""Registered datasets download themselves (datasets/download.py), against a local HTTP server, never the internet.

The server (http.server in a thread on 127.0.0.1) serves a temporary folder laid out as the real sources' URL paths;
``GNNDIST_MIRROR`` points every source URL at it and it counts the requests. Each source's files are small ones
written here in that source's own format and layout. Run with ``-rP`` to see what each download printed.
"""

import dataclasses
import gzip
import http.server
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch
from gnndist.datasets import download, load, names, spec, synthetic, write_ogb
from gnndist.datasets.ogbl import write_ogbl
from gnndist.datasets.planetoid import SUFFIXES

from gnndist.errors import UserError
from gnndist.testing import shared_data

BUNDLE = Path(__file__).resolve().parents[1] / "datasets" / "bundled" / "cora"


class Server:
    """A folder served over HTTP on 127.0.0.1: ``put`` a source URL's bytes, ``requests`` lists the paths asked for.

    ``short[path] = n``: announce the whole file but send only its first ``n`` bytes, then close.
    ``slow[path] = s``: send the file in 4 KiB pieces, ``s`` seconds apart.
    """

    def __init__(self, www: Path):
        self.www, self.requests, self.short, self.slow = www, [], {}, {}
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kw):
                super().__init__(*args, directory=str(www), **kw)

            def do_GET(self):
                server.requests.append(self.path)
                if self.path not in server.short and self.path not in server.slow:
                    return super().do_GET()
                body = (www / self.path.lstrip("/")).read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.path in server.short:
                    self.wfile.write(body[: server.short[self.path]])
                    return
                try:
                    for i in range(0, len(body), 4096):
                        self.wfile.write(body[i:i + 4096])
                        self.wfile.flush()
                        time.sleep(server.slow[self.path])
                except (BrokenPipeError, ConnectionResetError):  # the client was killed
                    pass

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # a short poll: shutdown() waits for the next one (the default 0.5 s was 10 s of idle teardown a suite)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def path_of(self, url: str) -> str:
        return download.mirrored(url, self.url)[len(self.url):]

    def put(self, url: str, body: bytes) -> str:
        """Serve ``body`` at ``url``'s path; returns that path."""
        path = self.path_of(url)
        dest = self.www / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(body)
        return path

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(tmp_path, monkeypatch):
    """The server, with ``GNNDIST_MIRROR`` at it, downloads allowed and a fresh data root ``$GNNDIST_DATA``."""
    s = Server(tmp_path / "www")
    monkeypatch.setenv("GNNDIST_MIRROR", s.url)
    monkeypatch.delenv("GNNDIST_OFFLINE", raising=False)
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "root"))
    yield s
    s.close()


def show(title: str, text: str) -> None:
    """The transcript of a download, as a user sees it (``-rP``)."""
    print(f"--- {title}\n{text.rstrip()}")


def leftovers(root: Path) -> list[str]:
    """Everything under ``root`` but lock files."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.name.endswith(".lock"))


def unverified(name: str) -> spec.Source:
    """``name``'s row without its sha256 and sizes: the test's own small files stand in for the real ones."""
    src = spec.source(name)
    return dataclasses.replace(src, files=tuple(dataclasses.replace(f, sha256=None, size=None) for f in src.files))


# ---------------------------------------------------------------- small files in each source's own format


def _graph(n=40, classes=2, features=5, seed=0):
    """A small SBM graph (x, y, edge_index) to write in every format; half its nodes train, a quarter each
    validate and test."""
    g = synthetic(n, avg_degree=4, num_classes=classes, num_features=features, seed=seed)
    k = torch.arange(n) % 4
    g.train_mask, g.val_mask, g.test_mask = k < 2, k == 2, k == 3
    return g


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def heterophily_npz(n=40) -> bytes:
    g = _graph(n)
    masks = np.stack([np.arange(n) % 4 == k for k in range(3)])  # [3, N]: train, val, test
    e = g.edge_index.numpy()
    return _npz(node_features=g.x.numpy(), node_labels=g.y.numpy(), edges=e[:, e[0] < e[1]].T,
                train_masks=masks[[0]].repeat(2, 0), val_masks=masks[[1]].repeat(2, 0),
                test_masks=masks[[2]].repeat(2, 0))


def shchur_npz(n=40) -> bytes:
    """Shchur's original keys: the adjacency and attributes as CSR parts, ``labels``."""
    g = _graph(n, classes=3)
    adj = sp.csr_matrix((np.ones(g.edge_index.size(1)), g.edge_index.numpy()), shape=(n, n))
    attr = sp.csr_matrix(g.x.numpy())
    return _npz(adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr, adj_shape=adj.shape,
                attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr, attr_shape=attr.shape,
                labels=g.y.numpy())


def gallery_npz(n=40) -> bytes:
    """GraphGallery's keys: pickled scipy matrices in 0-d object arrays, 1-based labels (as BlogCatalog's)."""
    g = _graph(n, classes=3)
    adj = sp.csr_matrix((np.ones(g.edge_index.size(1)), g.edge_index.numpy()), shape=(n, n))
    return _npz(adj_matrix=np.array(adj, dtype=object), node_attr=np.array(sp.csr_matrix(g.x.numpy()), dtype=object),
                node_label=g.y.numpy() + 1)


def jlg(n=40) -> bytes:
    """A Graphs.jl ``.jlg``: gzipped, header ``nv,ne,u,name``, 1-based edges."""
    e = _graph(n).edge_index.numpy()
    e = e[:, e[0] < e[1]]
    text = f"{n},{e.shape[1]},u,test\n" + "".join(f"{a + 1},{b + 1}\n" for a, b in e.T)
    return gzip.compress(text.encode())


def musae_files(n=40) -> dict[str, bytes]:
    g = _graph(n, classes=4)
    e = g.edge_index.numpy()
    edges = "id_1,id_2\n" + "".join(f"{a},{b}\n" for a, b in e[:, e[0] < e[1]].T)
    kinds = ["politician", "government", "tvshow", "company"]
    target = "id,facebook_id,page_name,page_type\n" + "".join(
        f"{i},{1000 + i},page {i},{kinds[int(g.y[i])]}\n" for i in range(n))
    features = {str(i): [int(i % 7), 7 + int(g.y[i])] for i in range(n)}
    return {"facebook_edges.csv": edges.encode(), "facebook_target.csv": target.encode(),
            "facebook.json": json.dumps(features).encode()}


def fb100_mat(n=40) -> bytes:
    g = _graph(n)
    adj = sp.csc_matrix((np.ones(g.edge_index.size(1)), g.edge_index.numpy()), shape=(n, n))
    info = np.stack([np.arange(n) % c + 1 for c in (2, 2, 5, 3, 4, 6, 7)], axis=1).astype(np.uint16)  # [N, 7]
    buf = io.BytesIO()
    scipy.io.savemat(buf, {"A": adj, "local_info": info})
    return buf.getvalue()


def planetoid_files(name: str) -> dict[str, bytes]:
    """Planetoid's eight ``ind.<name>.*`` pickles (the bundled Cora's bytes under ``name``)."""
    return {f"ind.{name}.{k}": (BUNDLE / f"ind.cora.{k}").read_bytes() for k in SUFFIXES}


def zipped(folder: Path, top: str, skip=("gnndist_meta.json",)) -> bytes:
    """``folder`` as OGB's zips hold it: every file under one top folder ``top/``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(folder.rglob("*")):
            if p.is_file() and p.name not in skip:
                z.write(p, f"{top}/{p.relative_to(folder)}")
    return buf.getvalue()


def ogbn_zip(tmp: Path, name="ogbn-arxiv", n=60) -> bytes:
    data = _graph(n, classes=4, features=8)
    folder = write_ogb(data, str(tmp / "written"), name)
    return zipped(Path(folder), spec.source(name).files[0].member)


def ogbl_zip(tmp: Path, name="ogbl-collab", n=60) -> bytes:
    folder = write_ogbl(_graph(n, features=8), str(tmp / "written"), name)
    return zipped(Path(folder), spec.source(name).files[0].member)


def serve(server: Server, name: str, files: dict[str, bytes] | bytes) -> list[str]:
    """Serve ``name``'s source files (one body, or a body per file name); returns their request paths."""
    src = spec.source(name)
    if isinstance(files, bytes):
        files = {src.files[0].url.rsplit("/", 1)[1]: files}
    return [server.put(f.url, files[f.url.rsplit("/", 1)[1]]) for f in src.files]


# ---------------------------------------------------------------- fresh root -> download -> load; again: no request

REGISTRY_CASES = {  # name -> (what its server holds, nodes); rows without a sha256: through load() as users do
    "citeseer": (lambda tmp: planetoid_files("citeseer"), 2708),
    "amazon-photo": (lambda tmp: shchur_npz(), 40),
    "tolokers": (lambda tmp: heterophily_npz(), 40),
    "ogbn-arxiv": (lambda tmp: ogbn_zip(tmp), 60),
    "ogbl-collab": (lambda tmp: ogbl_zip(tmp), 60),
}


@pytest.mark.parametrize("name", list(REGISTRY_CASES))
def test_fresh_root_downloads_then_loads_from_disk(name, server, tmp_path, capsys):
    make, n = REGISTRY_CASES[name]
    paths = serve(server, name, make(tmp_path))
    data = load(name)
    first, asked = capsys.readouterr().err, list(server.requests)
    again = load(name)
    second = capsys.readouterr().err
    show(f"{name}: fresh root", first)
    show(f"{name}: second run", second or f"(nothing printed; requests: {len(server.requests) - len(asked)})")
    assert int(data.num_nodes) == n
    assert sorted(asked) == sorted(paths)  # each file once
    assert first.count(f"{name}: licence ") == 1
    assert all(f"downloading {server.url}{p}" in first for p in paths)
    assert server.requests == asked and second == ""  # no request, nothing said
    assert torch.equal(again.edge_index, data.edge_index)


FETCH_CASES = {  # rows with a sha256 (the real files'): the test's stand-ins are fetched without it, then loaded
    "blogcatalog": (gallery_npz, 40),
    "email-enron": (jlg, 40),
    "facebook-page-page": (musae_files, 40),
    "fb100-cornell5": (fb100_mat, 40),
}


@pytest.mark.parametrize("name", list(FETCH_CASES))
def test_each_source_layout_loads(name, server, tmp_path):
    make, n = FETCH_CASES[name]
    paths = serve(server, name, make())
    out = io.StringIO()
    root = tmp_path / "root"
    download.fetch(name, str(root), f"{name}: missing", src=unverified(name), out=out)
    show(f"{name}: fresh root", out.getvalue())
    assert int(load(name).num_nodes) == n
    assert sorted(server.requests) == sorted(paths)


def test_real_files_pass_their_checksums(server, tmp_path, capsys):
    """The team's offline copies are the real sources' bytes: served as they are, the table's sha256 accepts them."""
    cases = {"texas": "texas/texas.npz", "email-enron": "snap_email_enron/email-enron.jlg"}
    for name, rel in cases.items():
        path = shared_data(rel)
        if not os.path.isfile(path):
            pytest.skip(f"{path} not present")
        serve(server, name, Path(path).read_bytes())
        assert int(load(name).num_nodes) > 0
    err = capsys.readouterr().err
    show("real files", err)
    assert err.count("sha256 checked") == 2


# ---------------------------------------------------------------- the CLI


def test_cli_run_downloads_its_dataset(server, tmp_path):
    (path,) = serve(server, "tolokers", heterophily_npz(60))
    env = {**os.environ, "GNNDIST_MIRROR": server.url, "GNNDIST_DATA": str(tmp_path / "root")}
    env.pop("GNNDIST_OFFLINE", None)
    r = subprocess.run([sys.executable, "-m", "gnndist.cli", "run", "tolokers", "--ranks", "1", "--epochs", "2"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    show("gnndist run tolokers --ranks 1 --epochs 2 (stderr)", r.stderr)
    assert r.returncode == 0, r.stderr[-2000:]
    assert server.requests == [path]
    assert "tolokers: downloading" in r.stderr and "tolokers: licence MIT" in r.stderr


# ---------------------------------------------------------------- damaged downloads: one line, nothing left behind


def corrupt(body: bytes) -> bytes:
    """``body`` with one byte of its first file's compressed data flipped (the zip's directory intact)."""
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        first = z.infolist()[0]
    at = first.header_offset + 30 + len(first.filename) + len(first.extra) + first.compress_size // 2  # [local header]
    return body[:at] + bytes([body[at] ^ 0xFF]) + body[at + 1:]


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_damaged_archive_is_one_line_and_leaves_nothing(damage, server, tmp_path, capsys):
    body = ogbn_zip(tmp_path)
    bad = body[: len(body) // 2] if damage == "truncated" else corrupt(body)
    (path,) = serve(server, "ogbn-arxiv", bad)  # the server sends it whole: the file itself is damaged
    root = tmp_path / "root"
    with pytest.raises(UserError) as e:
        load("ogbn-arxiv")
    show(f"ogbn-arxiv: {damage} archive", capsys.readouterr().err + f"UserError: {e.value}")
    assert "\n" not in str(e.value) and "is damaged" in str(e.value) and path in str(e.value)
    assert leftovers(root) == []
    serve(server, "ogbn-arxiv", body)  # the next run starts again
    assert int(load("ogbn-arxiv").num_nodes) == 60
    assert server.requests == [path, path]


def test_short_transfer_is_one_line_and_leaves_nothing(server, tmp_path):
    (path,) = serve(server, "tolokers", heterophily_npz())
    server.short[path] = 1000  # Content-Length says the whole file; the connection closes after 1000 bytes
    root = tmp_path / "root"
    with pytest.raises(UserError, match=r"got 1,000 of the [\d,]+ bytes the server announced") as e:
        load("tolokers")
    show("tolokers: short transfer", f"UserError: {e.value}")
    assert "\n" not in str(e.value) and leftovers(root) == []


@pytest.mark.parametrize("size", [3916, 28586], ids=["wrong-size", "right-size"])
def test_wrong_file_is_one_line_and_leaves_nothing(size, server, tmp_path):
    """Not the real texas.npz: the table's size, else its sha256, refuses it."""
    serve(server, "texas", np.random.default_rng(0).bytes(size))
    root = tmp_path / "root"
    expected = "expected 28,586" if size != 28586 else "sha256 [0-9a-f]+, expected b164b9"
    with pytest.raises(UserError, match=expected) as e:
        load("texas")
    show(f"texas: wrong file ({size:,} bytes)", f"UserError: {e.value}")
    assert "\n" not in str(e.value) and leftovers(root) == []


def test_http_error_keeps_the_missing_file_message(server, tmp_path):
    with pytest.raises(UserError, match=r"^blogcatalog: no file at .*; downloading .*blogcatalog.npz failed: "
                                        r"HTTP 404") as e:
        load("blogcatalog")
    assert "\n" not in str(e.value) and leftovers(tmp_path / "root") == []


# ---------------------------------------------------------------- offline


@pytest.mark.parametrize("name", ["tolokers", "ogbn-arxiv", "citeseer"])
def test_offline_refuses_in_one_line(name, server, tmp_path, monkeypatch):
    monkeypatch.setenv("GNNDIST_OFFLINE", "1")
    root = tmp_path / "root"
    with pytest.raises(UserError) as e:
        load(name)
    msg = str(e.value)
    show(f"{name}: GNNDIST_OFFLINE=1", f"UserError: {msg}")
    first = spec.source(name).files[0]
    assert "\n" not in msg and "GNNDIST_OFFLINE=1" in msg
    assert server.url + server.path_of(first.url) in msg and str(root / first.path) in msg
    assert msg.startswith(f"{name}: no file at" if name == "tolokers" else f"{name}: missing")  # the old wording
    assert server.requests == [] and not root.exists()


# ---------------------------------------------------------------- killed, concurrent


def _fetch_script(url: str, root: Path, name="tolokers") -> list[str]:
    """A process that fetches ``url`` as ``name``'s one file (as a rank does), printing what it says."""
    code = textwrap.dedent(f"""
        import sys
        from gnndist.datasets import download, spec
        src = spec.Source((spec.Remote({url!r}, "{name}/{name}.npz"),), "test licence", "test citation")
        download.fetch({name!r}, {str(root)!r}, "{name}: missing", src=src, out=sys.stdout)
    """)
    return [sys.executable, "-c", code]


def test_killed_download_leaves_nothing_and_the_next_run_starts_again(server, tmp_path):
    body = heterophily_npz(2000)
    (path,) = serve(server, "tolokers", body)
    server.slow[path] = 0.05
    root = tmp_path / "root"
    p = subprocess.Popen(_fetch_script(server.url + path, root), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    folder = root / "tolokers"
    deadline = time.monotonic() + 120
    while not (folder.is_dir() and any(f.stat().st_size > 0 for f in folder.iterdir())):
        assert time.monotonic() < deadline and p.poll() is None, p.stdout.read().decode()
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    half = sorted(f.name for f in folder.iterdir())
    show("killed mid-download: what it left", "\n".join(half))
    assert not (folder / "tolokers.npz").exists() and all(f.startswith(".tolokers.npz.") for f in half)
    server.slow.pop(path)
    out = io.StringIO()
    download.fetch("tolokers", str(root), "tolokers: missing", src=unverified("tolokers"), out=out)
    show("the next run", out.getvalue())
    assert sorted(f.name for f in folder.iterdir()) == ["tolokers.npz"]  # the leftover is gone
    assert (folder / "tolokers.npz").read_bytes() == body


def test_one_process_downloads_while_the_others_wait(server, tmp_path):
    (path,) = serve(server, "tolokers", heterophily_npz(2000))
    server.slow[path] = 0.05  # ~2 s: the others start while the first downloads
    root = tmp_path / "root"
    procs = [subprocess.Popen(_fetch_script(server.url + path, root), stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    show("three processes, one data root", "\n".join(f"[process {i}]\n{o}" for i, o in enumerate(outs)))
    assert all(p.returncode == 0 for p in procs)
    assert server.requests == [path]  # one download
    assert sum("tolokers: downloading" in o for o in outs) == 1 and sum("waiting for" in o for o in outs) >= 1
    assert leftovers(root) == ["tolokers", "tolokers/tolokers.npz"]


# ---------------------------------------------------------------- the table and the mirror


def test_every_registered_dataset_has_a_source():
    registered = [n for n in names() if not n.startswith("synthetic-")]
    assert [n for n in registered if spec.source(n) is None] == []
    arxiv = spec.source("ogbn-arxiv").files[0]
    assert (arxiv.url, arxiv.path, arxiv.member) == (
        "http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip", "ogbn_arxiv", "arxiv")  # OGB's master.csv
    assert spec.source("ogbn-mag").files[0].url.endswith("/mag.zip")
    hashed = [f for n in registered for f in spec.source(n).files if f.sha256]
    assert len({f.path for f in hashed}) == len(hashed) > 0  # one file, one hash
    assert all(re.fullmatch("[0-9a-f]{64}", f.sha256) and f.size > 0 for f in hashed)


def test_mirror_keeps_the_path():
    url = "https://github.com/shchur/gnn-benchmark/raw/master/data/npz/ms_academic_cs.npz"
    assert download.mirrored(url, "http://10.0.0.5:8080") == (
        "http://10.0.0.5:8080/shchur/gnn-benchmark/raw/master/data/npz/ms_academic_cs.npz")
    assert download.mirrored(url, "http://m:1/pub/") == "http://m:1/pub/shchur/gnn-benchmark/raw/master/data/npz/" \
                                                       "ms_academic_cs.npz"
    assert download.mirrored(url, "") == url
    with pytest.raises(UserError, match="GNNDIST_MIRROR=ftp://x: not an http"):
        download.mirrored(url, "ftp://x")


def test_progress_on_a_terminal_is_one_bar(server, tmp_path):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    (path,) = serve(server, "tolokers", heterophily_npz(3000))
    server.slow[path] = 0.05
    out = Terminal()
    download.fetch("tolokers", str(tmp_path / "root"), "tolokers: missing", src=unverified("tolokers"), out=out)
    text = out.getvalue()
    show("on a terminal (\\r shown as <CR>, erase-line as <EL>)", text.replace("\r", "<CR>").replace("\033[K", "<EL>"))
    bar = text.split("\n")[1].split("\r")
    assert len(bar) > 2 and all("/s" in b for b in bar[1:-1])  # redrawn in place: bytes, rate
    assert bar[-1].startswith("\033[Ktolokers: got ")  # wiped for the closing line


def test_leftover_copy_is_not_kept(tmp_path):
    """A killed atomic_dir (OGB's unpacking) or staging folder is removed by the next download of that target."""
    (tmp_path / ".ogbn_arxiv.tmp-abc").mkdir()
    (tmp_path / ".ogbn_arxiv.download-xyz").mkdir()
    (tmp_path / ".ogbn_arxiv_other").mkdir()
    download._clear_leftovers(str(tmp_path / "ogbn_arxiv"))
    assert sorted(os.listdir(tmp_path)) == [".ogbn_arxiv_other"]
