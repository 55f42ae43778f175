"""On-disk partition format: ``DIR/META.json`` + ``DIR/part-K/*.npy``, no pickle, sha256-checked.

A partition may hold sub-partitions, ``DIR/<name>/`` in the same format (another structure over the same owners,
e.g. ``valedges``), written in the same atomic write; ``DIR/META.json`` records the sha256 of each one's META.json
under ``inner`` (:func:`read_inner`).

Writes are atomic: everything goes to a temporary sibling directory that is renamed into
place only after ``META.json`` (written last) is complete, so an interrupted run never
leaves a directory that looks complete.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from gnndist.errors import UserError
from gnndist.files import atomic_dir

# What META.json records of the code that made a partition (``format_version``, ``algorithm_version``; a META.json
# without one of them is version 0 of it, made before it was recorded). docs/partitioning.md, "Versions".
# The layout of the files: bump when read_meta / read_part (or a rank) would read a partition differently or need
# what an older one lacks. A partition of a format not in READ_FORMATS is refused (read_meta), in one line saying how
# to remake it. 2: every id array (halo_gid, send_idx, orig_id, degree, rel_rowptr, rel_col) in int32 below 2^31 (issue
# 49), as rowptr and col were already; a gnndist that reads format 1 only refuses it rather than misread it.
FORMAT_VERSION = 2
READ_FORMATS = (1, 2)  # 1 held those arrays in int64: every reader takes either dtype as stored
# What the files hold: bump whenever a change would give different parts or part files for the same inputs
# (dataset, settings, seed): another assignment, node order, array value or dtype, or META.json value the ranks
# read. Re-recording tests/partition_checksums.json is such a change. The cache rebuilds a partition of another
# version (gnndist.parts.cache); gnndist train reads one as it is (every partition trains to the same numbers).
# 2: auto's memory budget (issue 49) runs KaMinPar alone from ~4M entries, where METIS ran before, and KaMinPar
# holds the graph compressed above 2^23 entries (other parts there). 3: the int32 id arrays of format 2 (the same
# values, the same assignment: tests/partition_checksums.json hashes them widened to the int64 it was recorded in).
# 4: the refinement's volume passes stop at the first pass that gains less than refine.MIN_PASS_GAIN, and KaMinPar
#    runs its terapart preset above 2^23 entries, not 2^25 (issue 49: other parts from both).
ALGORITHM_VERSION = 4
META = "META.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**27 else f"{n / 2**20:.1f} MiB"


def check_space(out: Path, need_bytes: int) -> None:
    """A one-line error, before anything is written, when ``out``'s file system has less than ``need_bytes`` free."""
    free = shutil.disk_usage(out.parent).free
    if free < need_bytes:
        raise UserError(f"not enough space for the partition in {out.parent}: it needs about {_gib(need_bytes)}, "
                        f"{_gib(free)} free (--out elsewhere, or $GNNDIST_PARTITIONS for the cache)")


def write_partition(out: str | Path, meta: dict, parts: Iterable[dict[str, np.ndarray]], need_bytes: int = 0,
                    inner: dict[str, tuple[dict, Iterable[dict[str, np.ndarray]]]] | None = None) -> Path:
    """Write every part's arrays and then META.json (with checksums) atomically to ``out``.

    Args:
        out: target directory; replaced if it exists.
        meta: JSON-serialisable metadata (dataset, parts, method, objective, seed, N, E, F, ...).
        parts: one dict of arrays per rank, in rank order (a generator keeps memory low).
        need_bytes: what the parts will take on disk (an estimate); a file system with less free is refused
            in one line before anything is written (:func:`check_space`).
        inner: sub-partitions by name, each ``(meta, parts)`` written the same way into ``out/<name>/`` before
            ``out``'s META.json, which records the sha256 of each one's META.json under ``inner``
            (:func:`read_inner`): other structures over the same owners, e.g. the message graph of training and
            validation edges (:data:`gnndist.partition.link.VALEDGES`).
    """
    out = Path(out).resolve()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        check_space(out, need_bytes)
    except OSError as e:
        in_the_way = isinstance(e, (FileExistsError, NotADirectoryError))
        why = "a file is in the way of its directory" if in_the_way else e.strerror
        raise UserError(f"cannot write the partition to {out}: {why or e}") from None
    try:  # a full disk or a permission: nothing is left behind
        with atomic_dir(out) as tmp, ThreadPoolExecutor(1) as hasher:
            hashes = _write_parts(tmp, parts, hasher)
            digests = {}
            for name, (sub_meta, sub_parts) in (inner or {}).items():
                sub = tmp / name
                sub.mkdir()
                digests[name] = _sha256(_write_meta(sub, sub_meta, _write_parts(sub, sub_parts, hasher)))
            _write_meta(tmp, {**meta, "inner": digests} if digests else meta, hashes)
    except OSError as e:
        raise UserError(f"cannot write the partition to {out}: {e.strerror or e}") from None
    return out


def _write_parts(folder: Path, parts: Iterable[dict[str, np.ndarray]], hasher: ThreadPoolExecutor) -> dict:
    """Each part's arrays into ``folder/part-K/``; each file's sha256 (a future) by its path under ``folder``, read
    back while the next part is built and written."""
    hashes = {}
    for k, arrays in enumerate(parts):
        pdir = folder / f"part-{k}"
        pdir.mkdir()
        for name, arr in arrays.items():
            path = pdir / f"{name}.npy"
            np.save(path, np.ascontiguousarray(arr), allow_pickle=False)
            hashes[f"part-{k}/{name}.npy"] = hasher.submit(_sha256, path)
        del arrays  # not alive while the next part is built
    return hashes


def _write_meta(folder: Path, meta: dict, hashes: dict) -> Path:
    """``folder/META.json``: ``meta`` with the versions and every part file's sha256 (written last)."""
    files = {rel: h.result() for rel, h in hashes.items()}
    meta = {"format_version": FORMAT_VERSION, "algorithm_version": ALGORITHM_VERSION, **meta, "sha256": files}
    with open(folder / META, "w") as f:
        json.dump(meta, f, indent=1)
    return folder / META


def read_meta(root: str | Path) -> dict:
    """Read and check ``META.json`` of a partition directory."""
    path = Path(root) / META
    if not path.is_file():
        raise UserError(f"{root} is not a gnndist partition directory (no {META}); create one with `gnndist partition`")
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is corrupt: {e}") from None
    if not isinstance(meta, dict):
        raise UserError(f"{path} is corrupt: not a JSON object")
    made = meta.get("format_version", 0)
    if made not in READ_FORMATS:
        newer = isinstance(made, int) and made > FORMAT_VERSION
        how = "a newer gnndist: train with that one, or" if newer else "an older gnndist:"
        raise UserError(f"{path}: partition format version {made} is not supported (this gnndist reads versions "
                        f"{', '.join(map(str, READ_FORMATS))}); it was made by {how} re-make it with "
                        f"`{remake_command(root, meta)}`")
    missing = [k for k in ("parts", "N", "F", "classes", "sha256") if k not in meta]
    if missing:
        raise UserError(f"{path} is corrupt: it lacks {', '.join(missing)}; re-run `gnndist partition`")
    return meta


def versions_of(meta: dict) -> tuple[int, int]:
    """``(format_version, algorithm_version)`` of a META.json (0 for a field it predates)."""
    return meta.get("format_version", 0), meta.get("algorithm_version", 0)


def other_versions(meta: dict) -> str | None:
    """``"made by partition format X / algorithm Y, this gnndist writes X' / Y'"`` for a META.json of other versions
    than this gnndist writes; ``None`` for one of its own."""
    made = versions_of(meta)
    if made == (FORMAT_VERSION, ALGORITHM_VERSION):
        return None
    return (f"made by partition format {made[0]} / algorithm {made[1]}, this gnndist writes "
            f"{FORMAT_VERSION} / {ALGORITHM_VERSION}")


def version_mismatch(root: str | Path) -> str | None:
    """:func:`other_versions` of the partition at ``root``, read whatever its format; ``None`` also when ``root`` has
    no readable META.json (nothing to say about versions)."""
    try:
        meta = json.loads((Path(root) / META).read_text())
    except (OSError, ValueError):
        return None
    return other_versions(meta) if isinstance(meta, dict) else None


def version_line(meta: dict) -> str:
    """``gnndist info``'s line: the versions that made the partition, against this gnndist's."""
    other = other_versions(meta)
    if other is not None:
        return f"{other} (train reads it as it is; the cache rebuilds it)"
    return f"made by partition format {FORMAT_VERSION} / algorithm {ALGORITHM_VERSION} (this gnndist's)"


def remake_command(root: str | Path, meta: dict) -> str:
    """The ``gnndist partition`` command that writes ``root`` again, with the settings its META.json records."""
    cmd = ["gnndist", "partition", str(meta.get("dataset", "DATASET")), "--parts", str(meta.get("parts", "P"))]
    if meta.get("method") not in (None, "auto"):
        cmd += ["--method", str(meta["method"])]
    if meta.get("seed"):
        cmd += ["--partition-seed", str(meta["seed"])]
    return shlex.join(cmd + ["--out", str(root)])


def read_part(root: str | Path, rank: int, meta: dict | None = None) -> dict[str, np.ndarray]:
    """Part ``rank``'s arrays, memory-mapped read-only (``np.memmap``), each file's sha256 verified against META.json.

    Nothing is copied: the checksum streams the file in 4 MiB reads (the page cache, not this
    process's memory) and the arrays are the file's pages, resident only once touched
    (:func:`gnndist.files.drop_pages` lets them go again). The arrays are read-only: a part is never written.
    """
    root = Path(root)
    meta = meta or read_meta(root)
    if not 0 <= rank < meta["parts"]:
        raise UserError(f"{root} has {meta['parts']} parts; part {rank} does not exist")
    arrays = {}
    for rel in _files_of(root, rank, meta):
        arrays[Path(rel).stem] = np.load(_checked(root, rel, meta), mmap_mode="r", allow_pickle=False)
    return arrays


def verify_partition(root: str | Path, meta: dict | None = None) -> int:
    """Check every part file of a partition (and of its sub-partitions) against its sha256 in META.json; returns the
    files checked.

    Raises the :class:`UserError` :func:`read_part` would (missing file, checksum mismatch, a part
    with no files), for the first bad file, without loading any array.
    """
    root = Path(root)
    meta = meta or read_meta(root)
    files = [(root, rel, meta) for rank in range(meta["parts"]) for rel in _files_of(root, rank, meta)]
    for name in meta.get("inner", {}):
        sub = read_inner(root, name, meta)
        files += [(root / name, rel, sub) for rank in range(sub["parts"]) for rel in _files_of(root / name, rank, sub)]
    for folder, rel, m in files:
        _checked(folder, rel, m)
    return len(files)


def read_inner(root: str | Path, name: str, meta: dict | None = None) -> dict:
    """META.json of the sub-partition ``name`` of the partition at ``root`` (``meta``: the partition's own), checked
    against the sha256 the partition records for it; its parts are read with :func:`read_part` at ``root/name``."""
    root = Path(root)
    meta = meta or read_meta(root)
    digest = meta.get("inner", {}).get(name)
    if digest is None:
        raise UserError(f"{root} holds no sub-partition {name!r}")
    path = root / name / META
    if not path.is_file() or _sha256(path) != digest:
        raise UserError(f"{path} is {'corrupt' if path.is_file() else 'missing'}: the partition is damaged, "
                        f"re-run `gnndist partition`")
    return read_meta(root / name)


def _files_of(root: Path, rank: int, meta: dict) -> list[str]:
    """The files META.json lists for part ``rank`` (paths relative to ``root``)."""
    prefix = f"part-{rank}/"
    names = [f for f in meta["sha256"] if f.startswith(prefix)]
    if not names:
        raise UserError(f"{root}: META.json lists no files for part {rank}")
    return names


def _checked(root: Path, rel: str, meta: dict) -> Path:
    """The path of ``rel`` under ``root`` once it exists and matches its sha256 in META.json."""
    path = root / rel
    if not path.is_file():
        raise UserError(f"missing partition file {path}")
    if _sha256(path) != meta["sha256"][rel]:
        raise UserError(f"checksum mismatch in {path}: the partition is corrupt, re-run `gnndist partition`")
    return path
