"""Degree-corrected stochastic block model: planted classes, skewed degrees, any size.

Every step is vectorised (no Python loop over nodes or edges): node weights come
from a Pareto law, each edge draws its source by weight and, with probability
``p_in``, its destination by weight inside the source's class, else anywhere.
"""

from __future__ import annotations

import re

import numpy as np
import torch
from torch_geometric.data import Data

from gnndist.errors import UserError

from .graph import make_data
from .split import set_random_split

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


def _sorted_uniform(rng: np.random.Generator, k: int) -> np.ndarray:
    """``k`` sorted uniforms on [0, 1) without a sort (normalised exponential spacings)."""
    u = np.cumsum(rng.standard_exponential(k + 1))
    u /= u[-1]
    return u[:-1]


def _weighted_picks(
    rng: np.random.Generator, cum: np.ndarray, lo: float, hi: float, k: int
) -> np.ndarray:
    """``k`` indices i drawn with probability proportional to ``cum[i] - cum[i-1]``,
    restricted to ``lo <= cum < hi``; returned sorted (sorted queries keep the binary
    search cache-friendly)."""
    q = lo + _sorted_uniform(rng, k) * (hi - lo)
    return np.minimum(np.searchsorted(cum, q, side="right"), cum.size - 1)


def synthetic(
    num_nodes: int,
    avg_degree: float = 10,
    num_classes: int = 8,
    num_features: int = 64,
    seed: int = 0,
    p_in: float = 0.8,
    power: float = 2.5,
    signal: float = 1.0,
    name: str | None = None,
    **split_kw: int,
) -> Data:
    """Generate a seeded degree-corrected SBM graph with class-correlated features.

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
    if num_nodes < 2 or num_classes < 1 or num_features < 1 or avg_degree <= 0:
        raise UserError(
            "synthetic: need num_nodes >= 2, num_classes >= 1, num_features >= 1, avg_degree > 0"
        )
    rng = np.random.default_rng(seed)
    n = num_nodes
    y = rng.integers(0, num_classes, n, dtype=np.int64)  # [N]
    theta = rng.pareto(power - 1.0, n) + 1.0  # [N] heavy-tailed degree weights
    np.minimum(theta, np.sqrt(n), out=theta)

    order = np.argsort(y, kind="stable")  # nodes grouped by class
    cum = np.cumsum(theta[order])  # [N] cumulative weight in class order
    class_end = np.searchsorted(y[order], np.arange(num_classes), side="right")
    class_hi = np.where(class_end > 0, cum[np.maximum(class_end - 1, 0)], 0.0)
    class_lo = np.concatenate([[0.0], class_hi[:-1]])
    total = cum[-1]

    m = round(n * avg_degree / 2)
    # sources sorted by position in class order, so each class is one contiguous run
    src = _weighted_picks(rng, cum, 0.0, total, m)  # [m] positions in `order`
    inside = rng.random(m) < p_in
    dst = np.empty(m, dtype=np.int64)
    run = np.searchsorted(src, np.concatenate([[0], class_end]))  # class runs of src
    for c in range(num_classes):  # a loop over classes, not nodes
        sel = np.flatnonzero(inside[run[c] : run[c + 1]]) + run[c]
        picks = _weighted_picks(rng, cum, class_lo[c], class_hi[c], sel.size)
        rng.shuffle(picks)
        dst[sel] = picks
    sel = np.flatnonzero(~inside)
    picks = _weighted_picks(rng, cum, 0.0, total, sel.size)
    rng.shuffle(picks)
    dst[sel] = picks
    del inside, sel, picks
    src, dst = order[src], order[dst]  # positions -> node ids
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

    centroids = rng.standard_normal((num_classes, num_features), dtype=np.float32)
    x = rng.standard_normal((n, num_features), dtype=np.float32)  # [N, F]
    x += signal * centroids[y]

    data = make_data(
        torch.from_numpy(x),
        torch.from_numpy(y),
        edge_index,
        name or f"synthetic-{n}",
        num_classes,
    )
    return set_random_split(data, seed=seed, **split_kw)
