"""gnndist: distributed full-graph GNN training that gives exactly the numbers of one device.

    import gnndist
    grid = gnndist.init()                                  # torchrun / --nproc environment
    graph = gnndist.DistGraph.load("parts/cora-p4", grid)  # this rank's part only
    model = gnndist.nn.build_model("gcn", graph.x.shape[1], 16, graph.num_classes, 2, 0.5)
    out = model(graph, graph.x)                            # [n_owned, classes]

Subpackages: ``gnndist.partition`` (METIS, plans, on-disk format), ``gnndist.kernels``
(aggregation ops), ``gnndist.datasets`` (loaders, synthetic graphs), ``gnndist.nn``
(layers, models), ``gnndist.strategies`` (distributed aggregation).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "init": "gnndist.grid",
    "ProcessGrid": "gnndist.grid",
    "DistGraph": "gnndist.graph",
    "Trainer": "gnndist.trainer",
    "TrainConfig": "gnndist.config",
    "UserError": "gnndist.errors",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    """Import the public names on first use (keeps ``import gnndist`` light and free of cycles)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in ("nn", "partition", "kernels", "datasets", "strategies"):
        return importlib.import_module(f"gnndist.{name}")
    raise AttributeError(f"module 'gnndist' has no attribute {name!r}")
