"""gnndist on one rank and the single-process PyG GCN it is compared with: same model, data, optimiser.

One step = forward with dropout, loss over the training nodes, backward, Adam step
(lr 0.01, weight decay 5e-4), reading the loss: what ``Trainer.train_step`` does. The
PyG model is ``layers`` ``GCNConv`` with dropout 0.5 before each and ReLU between;
features are row-normalised on both sides when none is negative (gnndist's default).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class PygGCN(nn.Module):
    """``layers`` ``torch_geometric.nn.GCNConv``: dropout before each, ReLU between them.

    Shapes:
        x ``[N, in_channels]``, adj ``edge_index [2, E]`` or a sparse ``[N, N]`` -> ``[N, out_channels]``
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 2,
                 dropout: float = 0.5, cached: bool = True):
        from torch_geometric.nn import GCNConv

        super().__init__()
        widths = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(GCNConv(a, b, cached=cached) for a, b in itertools.pairwise(widths))
        self.dropout = dropout

    def forward(self, x, adj):
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, self.dropout, self.training)
            x = conv(x, adj)  # [N, width]
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gnndist_trainer(partdir, hidden: int, layers: int, device: torch.device, normalize: bool = True,
                    kernel: str = "auto", precision: str = "fp32"):
    """A :class:`~gnndist.training.trainer.Trainer` of a GCN on the 1-part partition in ``partdir``, on ``device``,
    with the ``kernel`` path (``auto``: the dispatcher's) and ``--precision`` (its ``train_step`` is what the peer
    comparison times)."""
    from gnndist.config import ModelConfig, OptimConfig, RunConfig, TrainConfig
    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph
    from gnndist.kernels import KernelSettings
    from gnndist.partition import load as load_part
    from gnndist.training.trainer import Trainer

    arrays, meta = load_part(partdir, 0)
    g = DistGraph(arrays, meta, ProcessGrid(device=device), normalize_features=normalize,
                  kernel=KernelSettings(None if kernel == "auto" else kernel))  # every array on `device`
    cfg = TrainConfig(model=ModelConfig(hidden=hidden, layers=layers, dropout=0.5),
                      optim=OptimConfig(precision=precision), run=RunConfig(progress=False))
    return Trainer(g, cfg)


def pyg_step(data, hidden: int, layers: int, adj_kind: str, cached: bool,
             device: torch.device, normalize: bool | None = None, autocast: torch.dtype | None = None
             ) -> Callable[[int], float]:
    """One training step of :class:`PygGCN` on ``edge_index`` or a ``torch.sparse_csr`` adjacency.

    ``normalize``: divide features by their row sums (default: when none is negative, as gnndist).
    ``autocast``: run the forward under ``torch.autocast(device, autocast)`` (PyG's way to half precision).
    """
    import torch_geometric.transforms as T
    from torch_geometric.data import Data

    x = data.x.to(device)
    if normalize if normalize is not None else not bool((x < 0).any()):
        x = x / x.sum(dim=1, keepdim=True).clamp(min=1e-12)
    edge_index = data.edge_index.to(device)  # [2, E]
    if adj_kind == "sparse_csr":
        adj = T.ToSparseTensor(layout=torch.sparse_csr)(Data(edge_index=edge_index, num_nodes=data.num_nodes)).adj_t
    else:
        adj = edge_index
    torch.manual_seed(0)
    classes = int(getattr(data, "num_classes", None) or int(data.y.max()) + 1)
    model = PygGCN(x.shape[1], hidden, classes, layers, cached=cached).to(device)
    optim = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    y, mask = data.y.to(device), data.train_mask.to(device)

    def step(epoch: int) -> float:
        model.train()
        optim.zero_grad(set_to_none=True)
        with torch.autocast(device.type, autocast or torch.float32, enabled=autocast is not None):
            out = model(x, adj)  # [N, classes]
        loss = F.cross_entropy(out[mask].float(), y[mask])
        loss.backward()
        optim.step()
        return float(loss.detach())

    return step


def time_steps(step: Callable[[int], float], warmup: int, reps: int, device: torch.device) -> list[float]:
    """Seconds of each of ``reps`` steps after ``warmup`` untimed ones, the device synchronised around each."""
    for e in range(warmup):
        step(e)
    out = []
    for e in range(warmup, warmup + reps):
        synchronize(device)
        t0 = time.perf_counter()
        step(e)
        synchronize(device)
        out.append(time.perf_counter() - t0)
    return out
