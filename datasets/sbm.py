"""Degree-corrected stochastic block model: planted classes, skewed degrees, any size.

Every step is vectorised (no Python loop over nodes or edges): node weights come
from a Pareto law, each edge draws its source by weight and, with probability
``p_in``, its destination by weight inside the source's class, else anywhere.
One seeded stream (`_Stream`), drawn a chunk at a time, makes the graph: `synthetic`
gathers it in memory, `write_synthetic` writes it to a ``.npy`` folder, and a
``synthetic-<N>[-d<deg>]`` name loads through that folder (`named_folder`).
"""

from __future__ import annotations

import json
import os.path as osp
import re
from typing import TYPE_CHECKING

import numpy as np
import torch

from gnndist.errors import UserError
from gnndist.files import atomic_dir
from gnndist.machine import CHUNK

from .graph import make_data
from .spec import register
from .split import set_random_split

if TYPE_CHECKING:
    from torch_geometric.data import Data

NAME_RE = re.compile(r"^synthetic-(\d+(?:\.\d+)?)([kmb]?)(?:-d(\d+))?$", re.IGNORECASE)
SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9}
NAMED_AVG_DEGREE = 50  # synthetic-2m: ~2M nodes, ~50M undirected edges


def parse_name(name: str) -> tuple[int, int] | None:
    """``synthetic-10k`` -> (10000, 50); ``synthetic-1m-d20`` -> (1000000, 20); else None."""
    m = NAME_RE.match(name)
    if m is None:
        return None
    n = int(float(m.group(1)) * SCALE[m.group(2).lower()])
    if n < 2:
        raise UserError(f"{name}: a synthetic graph needs at least 2 nodes")
    return n, int(m.group(3)) if m.group(3) else NAMED_AVG_DEGREE


def _picks(rng, cum: np.ndarray, lo: float, hi: float, k: int, shuffle: bool = False) -> np.ndarray:
    """``k`` indices drawn with probability ``cum[i] - cum[i - 1]`` inside ``lo <= cum < hi``: sorted, or shuffled.

    Sorted queries keep the binary search cache-friendly; ``k`` sorted uniforms come without a sort as
    normalised exponential spacings.
    """
    u = np.cumsum(rng.standard_exponential(k + 1))
    q = lo + (u[:-1] / u[-1]) * (hi - lo)
    out = np.minimum(np.searchsorted(cum, q, side="right"), len(cum) - 1)
    if shuffle:
        rng.shuffle(out)
    return out


class _Stream:
    """The model's one seeded stream: labels and weights, then edges, then features, ``chunk`` at a time.

    `synthetic` gathers it in memory and `write_synthetic` writes it to a ``.npy`` folder, so a
    ``synthetic-*`` graph is the same graph either way (its raw edges, before cleaning, included).
    Memory: a few ``[N]`` arrays and one chunk.
    """

    def __init__(self, n: int, avg_degree: float, num_classes: int, num_features: int, seed: int,
                 p_in: float, power: float, signal: float, chunk: int = CHUNK):
        self.rng = rng = np.random.default_rng(seed)
        self.n, self.num_classes, self.num_features = n, num_classes, num_features
        self.p_in, self.signal, self.chunk = p_in, signal, max(int(chunk), 1)
        self.y = rng.integers(0, num_classes, n, dtype=np.int64)  # [N]
        theta = rng.pareto(power - 1.0, n) + 1.0  # [N] heavy-tailed degree weights
        np.minimum(theta, np.sqrt(n), out=theta)
        self.order = np.argsort(self.y, kind="stable").astype(np.int32 if n < 2**31 else np.int64)  # class order
        self.cum = np.cumsum(theta[self.order])  # [N] cumulative weight in class order
        del theta
        self.class_end = np.searchsorted(self.y[self.order], np.arange(num_classes), side="right")
        self.class_hi = np.where(self.class_end > 0, self.cum[np.maximum(self.class_end - 1, 0)], 0.0)
        self.class_lo = np.concatenate([[0.0], self.class_hi[:-1]])
        self.m = round(n * avg_degree / 2)

    def edges(self):
        """Yield ``(e0, src, dst)``: node ids of edges ``e0 ..``, self-loops and duplicates included.

        A source is drawn by weight; its destination by weight inside the source's class with
        probability ``p_in``, else anywhere (sorted queries, shuffled per class run).
        """
        rng, cum, total = self.rng, self.cum, self.cum[-1]
        for e0 in range(0, self.m, self.chunk):
            k = min(self.chunk, self.m - e0)
            src = _picks(rng, cum, 0.0, total, k)  # [k] positions in class order, sorted
            inside = rng.random(k) < self.p_in
            dst = np.empty(k, dtype=np.int64)
            run = np.searchsorted(src, np.concatenate([[0], self.class_end]))  # class runs of src
            for c in range(self.num_classes):  # a loop over classes, not nodes
                sel = np.flatnonzero(inside[run[c] : run[c + 1]]) + run[c]
                dst[sel] = _picks(rng, cum, self.class_lo[c], self.class_hi[c], len(sel), shuffle=True)
            sel = np.flatnonzero(~inside)
            dst[sel] = _picks(rng, cum, 0.0, total, len(sel), shuffle=True)
            yield e0, self.order[src], self.order[dst]

    def features(self):
        """Yield ``(r0, x)``: feature rows ``r0 ..`` (unit noise around the class centroid), after `edges`."""
        f = self.num_features
        centroids = self.rng.standard_normal((self.num_classes, f), dtype=np.float32)
        rows = max(self.chunk // f, 1)
        for r0 in range(0, self.n, rows):
            x = self.rng.standard_normal((min(rows, self.n - r0), f), dtype=np.float32)
            x += self.signal * centroids[self.y[r0 : r0 + rows]]
            yield r0, x


def _check(num_nodes: int, avg_degree: float, num_classes: int, num_features: int, what: str) -> None:
    if num_nodes < 2 or num_classes < 1 or num_features < 1 or avg_degree <= 0 or num_nodes >= 2**31:
        raise UserError(f"{what}: need 2 <= num_nodes < 2^31, num_classes >= 1, num_features >= 1, avg_degree > 0")


def synthetic(num_nodes: int, avg_degree: float = 10, num_classes: int = 8, num_features: int = 64, seed: int = 0,
              p_in: float = 0.8, power: float = 2.5, signal: float = 1.0, name: str | None = None,
              **split_kw: int) -> Data:
    """Generate a seeded degree-corrected SBM graph with class-correlated features, in memory.

    The graph `write_synthetic` writes for the same arguments, cleaned (symmetric, no self-loops or
    duplicates, sorted), with the same features, labels and split.

    Args:
        num_nodes: number of nodes N.
        avg_degree: target mean number of neighbours (directed entries per node);
            the graph has about ``N * avg_degree / 2`` undirected edges, a little
            fewer after duplicates and self-loops are dropped.
        num_classes: planted classes C (uniform class sizes).
        num_features: feature dim F.
        seed: seed of everything (same seed, same graph).
        p_in: probability that an edge stays inside its source's class (homophily).
        power: Pareto exponent of the node weights; smaller means more skewed degrees.
        signal: distance of class centroids in feature space relative to unit noise.
        name: ``data.name`` (default ``synthetic-<N>``).
        split_kw: ``train_per_class`` / ``val_per_class`` of the random split (20 / 30).

    Shapes:
        x: [N, F] float32; y: [N] int64; edge_index: [2, ~N * avg_degree] int64.
    """
    _check(num_nodes, avg_degree, num_classes, num_features, "synthetic")
    s = _Stream(num_nodes, avg_degree, num_classes, num_features, seed, p_in, power, signal)
    n = num_nodes
    src = np.empty(s.m, dtype=np.int64)
    dst = np.empty(s.m, dtype=np.int64)
    for e0, a, b in s.edges():
        src[e0 : e0 + len(a)], dst[e0 : e0 + len(b)] = a, b
    keep = src != dst  # drop self-loops
    src, dst = src[keep], dst[keep]
    del keep
    nn = np.int64(n)
    keys = np.concatenate([src * nn + dst, dst * nn + src])  # [2m] both directions
    del src, dst
    keys.sort()  # numpy's integer sort is much faster than torch's on CPU
    first = np.empty(keys.size, dtype=bool)
    first[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    keys = keys[first]  # [E] unique, sorted by (row, col)
    del first
    row = keys // nn
    keys -= row * nn  # keys now hold the columns
    edge_index = torch.from_numpy(np.stack([row, keys]))  # [2, E]
    del row, keys
    x = np.empty((n, num_features), dtype=np.float32)  # [N, F]
    for r0, rows in s.features():
        x[r0 : r0 + len(rows)] = rows
    data = make_data(torch.from_numpy(x), torch.from_numpy(s.y), edge_index, name or f"synthetic-{n}", num_classes)
    return set_random_split(data, seed=seed, **split_kw)


def write_synthetic(out: str, num_nodes: int, avg_degree: float = 50, num_classes: int = 8, num_features: int = 64,
                    seed: int = 0, p_in: float = 0.8, power: float = 2.5, signal: float = 1.0,
                    chunk: int = CHUNK, progress=None, name: str | None = None, replace: bool = True) -> str:
    """Generate the graph of :func:`synthetic` into a ``.npy`` folder, a chunk at a time.

    Memory holds a few ``[N]`` arrays and one chunk; the edge list is stored raw (int32 ids,
    self-loops and duplicates left for the partitioner, which cleans them as `synthetic` does).
    Written to a temporary sibling folder renamed into place when complete; an existing ``out`` is
    replaced, or kept (the new copy dropped) with ``replace=False``.

    Shapes:
        edge_index ``[2, round(N * avg_degree / 2)]`` int32; x ``[N, F]`` float32; y ``[N]`` int64; masks ``[N]``.
    """
    from .npy_folder import EDGES, MASKS, NpyWriter
    from .split import per_class_split

    _check(num_nodes, avg_degree, num_classes, num_features, "synth")
    say = progress or (lambda msg: None)
    out = osp.abspath(out)
    try:
        with atomic_dir(out, replace=replace) as folder:  # another process wrote it first (replace=False): keep theirs
            tmp = str(folder)
            s = _Stream(num_nodes, avg_degree, num_classes, num_features, seed, p_in, power, signal, chunk)
            n, m = num_nodes, s.m
            ew = NpyWriter(osp.join(tmp, EDGES), (2, m), np.int32)
            for e0, src, dst in s.edges():
                ew.write_at(e0, src)
                ew.write_at(m + e0, dst)
                say(f"synth edges {e0 + len(src):,}/{m:,}")
            ew.close()
            xw = NpyWriter(osp.join(tmp, "x.npy"), (n, num_features), np.float32)
            for r0, x in s.features():
                xw.write_at(r0 * num_features, x)
                say(f"synth features {r0 + len(x):,}/{n:,}")
            xw.close()
            np.save(osp.join(tmp, "y.npy"), s.y)
            for mask_name, mask in zip(MASKS, per_class_split(torch.from_numpy(s.y), num_classes, seed=seed)):
                np.save(osp.join(tmp, f"{mask_name}.npy"), mask.numpy())
            with open(osp.join(tmp, "meta.json"), "w") as f:
                json.dump({"num_nodes": n, "num_classes": num_classes, "name": name or osp.basename(out),
                           "generator": {"model": "dc-sbm", "avg_degree": avg_degree, "seed": seed, "p_in": p_in,
                                         "power": power, "signal": signal}}, f)
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None
    return out


def named_folder(name: str, root: str, seed: int = 0, progress=None) -> str:
    """The ``.npy`` folder of ``synthetic-*`` graph ``name`` under ``root/synthetic``, generated on first use.

    A name loads through its folder, as ``gnndist synth NAME --out DIR`` writes it, so a name and its
    folder partition the same graph at the same peak. Two processes generating at once both finish;
    one folder stays.
    """
    n, deg = parse_name(name.lower())
    out = osp.join(root, "synthetic", f"synthetic-{n}-d{deg}-s{seed}")
    if osp.isfile(osp.join(out, "meta.json")):
        return out
    return write_synthetic(out, n, deg, seed=seed, progress=progress, name=name.lower(), replace=False)


def load_named(name: str, root: str, seed: int = 0) -> Data:
    """The ``synthetic-*`` graph ``name``, generated once into ``root/synthetic/`` (:func:`named_folder`) and read as
    that ``.npy`` folder, like a path to it: memory-mapped, with its raw edge list (``data.raw_edges``)."""
    from .npy_folder import read_npy_folder

    data = read_npy_folder(named_folder(name, root, seed), name, seed)
    data.name = name
    return data


def cmd_synth(args) -> int:
    """``gnndist synth NAME --out DIR [--feature-dim F] [--seed S]``: a ``synthetic-*`` graph into a ``.npy`` folder."""
    import time

    parsed = parse_name(args.name.lower())
    if parsed is None:
        raise UserError(f"synth: {args.name!r} is not synthetic-<N>[k|m|b][-d<avg degree>]")
    n, deg = parsed
    last = [0.0]

    def say(msg: str) -> None:
        now = time.monotonic()
        done, total = msg.split()[-1].split("/")
        if now - last[0] > 5 or done == total:
            print(msg, flush=True)
            last[0] = now

    out = write_synthetic(args.out, n, deg, num_features=args.features, seed=args.seed, progress=say)
    print(f"wrote {out}")
    return 0


register("synthetic-<N>[k|m|b][-d<deg>]", load_named, pattern=NAME_RE.pattern,
         examples=("synthetic-10k", "synthetic-1m", "synthetic-2m"))
