"""Registered datasets download themselves: `fetch` brings one dataset into the data root.

    fetch(name, root, missing)   # the registry calls it when a loader raised MissingFiles, then loads again

Every registered dataset with a public source declares it in its spec, beside its loader (:func:`.spec.source`: each
file's URL, where it goes under the data root, its sha256 and size where known, the licence and the citation). A
download:

1. refuses at once under ``GNNDIST_OFFLINE=1``: one line, the loader's missing-file message and the URL;
2. takes an exclusive ``fcntl.flock`` on ``<root>/.<folder>.lock``, beside the dataset's folder: of the processes
   sharing a data root (the ranks of a machine under torchrun; every machine, where the root is on a shared file
   system whose locks reach across hosts), one downloads while the others wait, then find the files in place;
3. streams each file into a hidden sibling of its target, with a progress bar on a terminal (bytes, rate), else a
   line per stage;
4. checks it: the size (the spec's, else the server's Content-Length), the sha256 where the spec has one, else
   the archive's own integrity (a zip's CRCs, a gzip's stream);
5. renames it into place (a zip: unpacked into a hidden sibling folder that is renamed into place), so a killed
   download leaves no target, only hidden siblings, which the next download removes under the lock;
6. prints the source's licence and citation.

``GNNDIST_MIRROR=http://HOST:PORT`` replaces the scheme and host of every URL and keeps its path (mirrors,
air-gapped clusters, tests). Both variables are the user's, read here where they are used (as ``$GNNDIST_DATA`` is
in :func:`gnndist.machine.data_root`). docs/downloads.md has the table of sources, checked against the specs by
tests/test_dataset_spec.py.
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
from typing import IO

from gnndist.errors import UserError, first_line
from gnndist.files import atomic_dir, atomic_file

from .spec import Remote, Source, source

MARKER = ".gnndist-download"  # written last into a folder unpacked from a zip: the folder is whole
TIMEOUT_S = 60  # a connection that stalls this long fails
_BLOCK = 1 << 20


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
        src: the dataset's source (default: its spec's, :func:`.spec.source`).
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
