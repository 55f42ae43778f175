"""The single-process PyG GCN that the benchmarks compare gnndist with (same model as gnndist's GNN).

It lives in :mod:`gnndist.bench.peer` (``gnndist bench peer`` uses it); imported here by
``train.py`` and ``accuracy.py``.
"""

from gnndist.bench.peer import PygGCN

__all__ = ["PygGCN"]
