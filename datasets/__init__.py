"""Dataset registry: Planetoid/OGB/npz/edge-list loaders and synthetic graphs.

load(dataset, root=None, format=None, seed=0) -> torch_geometric.data.Data
names() -> list[str]; default_root() -> str
synthetic(num_nodes, avg_degree=10, ...) -> Data
validate(data) -> None; write_ogb(data, root, name) -> path
"""

from .ogb import write_ogb
from .registry import default_root, load, names
from .synthetic import synthetic
from .validate import validate

__all__ = ["default_root", "load", "names", "synthetic", "validate", "write_ogb"]
