"""gnndist: distributed full-graph GNN training that gives exactly the numbers of one device.

    import gnndist

    def train(grid, partdir):                                      # one rank's body
        graph = gnndist.DistGraph.load(partdir, grid)              # this rank's part only
        trainer = gnndist.Trainer(graph, gnndist.TrainConfig(), model=MyModel)  # MyModel(in, out)
        return trainer.fit()                                       # a RunSummary, exact for any P

    summary = gnndist.launch(train, "parts/cora-p4", ranks=4)      # or one rank of torchrun

Subpackages: ``gnndist.partition`` (METIS, plans, on-disk format), ``gnndist.kernels``
(aggregation ops), ``gnndist.datasets`` (loaders, synthetic graphs), ``gnndist.nn``
(layers, models), ``gnndist.strategies`` (distributed aggregation).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "launch": "gnndist.launcher",
    "init": "gnndist.launcher",
    "ProcessGrid": "gnndist.dist.grid",
    "DistGraph": "gnndist.graph",
    "Trainer": "gnndist.training.trainer",
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
