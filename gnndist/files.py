"""Files written whole or not at all: the one home of gnndist's temporary-sibling-and-rename writes.

    with atomic_file(path, "wb", fsync=True) as f:   # checkpoints, caches, CSV tables
        torch.save(state, f)
    with atomic_dir(out) as tmp:                      # partitions, generated datasets
        write_everything_into(tmp)

A reader sees the old file (or folder) or the new one, never a part: the writing goes to a sibling named by
host, process and a random part (so processes of several hosts sharing the folder never collide), renamed over
the target only when the body ends without an error; on any error, Ctrl-C included, the sibling is removed.
And :func:`drop_pages`, which lets a memory-mapped array's resident pages go. Bottom layer: the standard library
and numpy only.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np


def _tag() -> str:
    return f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "w", fsync: bool = False, **open_kw) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` in ``mode`` (``"w"``/``"wb"``; ``open_kw`` to :func:`open`), yield it;
    on success flush it (and ``fsync`` it: the data on disk before the rename, for what must survive a power loss)
    and rename it over ``path``. The parent folder is created. Raises what the writing raised (``OSError``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{_tag()}.tmp")
    try:
        with open(tmp, mode, **open_kw) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(out: str | Path, replace: bool = True) -> Iterator[Path]:
    """A temporary sibling folder of ``out`` to fill; on success it becomes ``out``. An existing ``out`` is
    replaced (moved aside first, so ``out`` is never missing for long), or with ``replace=False`` kept as it is
    (another process wrote it first) and the new one dropped. The parent folder is created."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
        if not out.exists():
            os.rename(tmp, out)
        elif replace:
            trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.rename(out, trash / out.name)
            os.rename(tmp, out)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def drop_pages(arr: np.ndarray, start: int = 0, stop: int | None = None) -> None:
    """Let this process's resident pages of rows ``[start, stop)`` of a memory-mapped array go (``MADV_DONTNEED``).

    The page cache keeps them: touching the rows maps them again. A no-op for an array that is
    not memory-mapped (or a platform without ``madvise``).
    """
    mm = getattr(arr, "_mmap", None)
    if mm is None or not hasattr(mm, "madvise") or arr.size == 0:
        return
    row = arr.strides[0] if arr.ndim else arr.itemsize
    stop = len(arr) if stop is None else stop
    base = np.frombuffer(mm, np.uint8).ctypes.data  # where the mapping starts
    lo = arr.ctypes.data - base + start * row
    hi = arr.ctypes.data - base + stop * row
    lo -= lo % mmap.PAGESIZE  # madvise takes whole pages: the partial first page goes too (mapped again if read)
    if hi > lo:
        try:
            mm.madvise(mmap.MADV_DONTNEED, lo, min(hi, len(mm)) - lo)
        except (OSError, ValueError):
            pass


def drop_mapped(address: int, nbytes: int) -> bool:
    """Let this process's resident pages of ``[address, address + nbytes)`` go (``MADV_DONTNEED``) where the range
    lies whole inside one read-only file mapping (``/proc/self/maps``: a memory-mapped part's array, the bytes of a
    tensor made from it); anything else is left alone. The page cache keeps the pages: touching them maps them
    again. Returns whether it did (Linux only; False elsewhere)."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read().splitlines()
    except OSError:
        return False
    for line in maps:
        fields = line.split(maxsplit=5)
        lo, hi = (int(v, 16) for v in fields[0].split("-"))
        if lo <= address and address + nbytes <= hi:
            if len(fields) < 6 or not fields[5].startswith("/") or "w" in fields[1]:
                return False  # anonymous or writable: its pages are its only copy
            return _madvise_dontneed(address, nbytes)
    return False


def _madvise_dontneed(address: int, nbytes: int) -> bool:
    """``madvise(MADV_DONTNEED)`` over the whole pages inside ``[address, address + nbytes)``."""
    import ctypes

    page = mmap.PAGESIZE
    lo, hi = -(-address // page) * page, (address + nbytes) // page * page
    if hi <= lo:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), mmap.MADV_DONTNEED) == 0
