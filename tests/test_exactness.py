"""P ranks equal one process: per-epoch losses, gradients against PyG, and halo bytes.

Ranks are spawned once per world size; each rank trains every model and returns what
the parent compares.
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from gnndist.partition import partition
from torch import nn

from gnndist.config import DistConfig, TrainConfig
from gnndist.graph import DistGraph
from gnndist.strategies import strategy_from_config
from gnndist.testing import QUICK_PARTITION, assert_close, run_distributed
from gnndist.training.trainer import Trainer

CHECK_COLLECTIVES = False  # long loops compared with one process: tests/conftest.py's _collective_check

EPOCHS = 6
CASES = [  # (model, norm, overlap)
    ("gcn", "none", True),
    ("sage", "none", True),
    ("gin", "batch", True),
    ("gcn", "layer", False),
]


def _data():
    from gnndist.datasets import synthetic  # here: the spawned ranks importing this module never load torch_geometric

    data = synthetic(240, avg_degree=6, num_classes=4, num_features=12, seed=7)
    data.train_mask[:] = False
    data.train_mask[::3] = True  # 80 training nodes spread over every part
    return data


def _cfg(model, norm, dropout=0.5, epochs=EPOCHS, overlap=True):
    cfg = TrainConfig()
    cfg.model.model, cfg.model.norm, cfg.model.dropout, cfg.model.hidden = model, norm, dropout, 8
    cfg.model.normalize_features = False
    cfg.optim.epochs = epochs
    cfg.run.progress = False
    cfg.dist.overlap = overlap
    return cfg


def _rank_job(grid, partdir):
    """Every case on this rank: losses of EPOCHS epochs with dropout, then one step's grads without."""
    out = {}
    for model, norm, overlap in CASES:
        graph = DistGraph.load(partdir, grid, strategy=strategy_from_config(DistConfig(strategy="1d", overlap=overlap)))
        trainer = Trainer(graph, _cfg(model, norm, overlap=overlap))
        trainer.fit()
        losses = [row["loss"] for row in trainer.history]

        graph = DistGraph.load(partdir, grid)
        trainer = Trainer(graph, _cfg(model, norm, dropout=0.0))
        trainer.model.train()
        init = copy.deepcopy(trainer.model.state_dict())
        logits = trainer.model(graph, graph.x)
        trainer.task.objective(logits).backward()
        trainer.allreduce_grads()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}
        owned = graph.orig_id[: graph.n_owned]
        per_tag = graph.context.counter.per_tag()
        out[(model, norm, overlap)] = dict(losses=losses, grads=grads, init=init, logits=logits.detach(),
                                          ids=owned, bytes=per_tag)
    return out


class PygGNN(nn.Module):
    """The same models on one process with torch_geometric layers (same parameter names)."""

    def __init__(self, model, widths, norm):
        import torch_geometric.nn as pyg_nn  # here: the spawned ranks importing this module never load torch_geometric

        super().__init__()
        make = {
            "gcn": lambda a, b: pyg_nn.GCNConv(a, b),
            "sage": lambda a, b: pyg_nn.SAGEConv(a, b),
            "gin": lambda a, b: pyg_nn.GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b))),
        }[model]
        self.convs = nn.ModuleList(make(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.norm = norm
        self.norms = nn.ModuleList(
            {"none": nn.Identity, "layer": nn.LayerNorm, "batch": nn.BatchNorm1d}[norm](widths[1])
            for _ in range(len(widths) - 2)
        )

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.relu(self.norms[i](x))
        return x


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    data = _data()
    results = {}
    for world in (1, 2, 4):
        d = tmp_path_factory.mktemp(f"p{world}")
        p = partition(data, world, **QUICK_PARTITION)
        p.save(d, dataset="toy")
        results[world] = (run_distributed(_rank_job, world, str(d)), p.report)
    return data, results


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_losses_equal_one_process(runs, world, case):
    _, results = runs
    ref = torch.tensor(results[1][0][0][case]["losses"], dtype=torch.float64)
    for rank_out in results[world][0]:
        got = torch.tensor(rank_out[case]["losses"], dtype=torch.float64)
        assert len(got) == EPOCHS
        assert_close(f"losses P={world}", ref, got, rtol=1e-5)
    assert ref[-1] < ref[0]  # it trains


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_gradients_equal_pyg(runs, world, case):
    data, results = runs
    model, norm, _ = case
    ranks = results[world][0]
    first = ranks[0][case]
    widths = [data.x.shape[1], 8, 4]
    ref = PygGNN(model, widths, norm)
    missing, unexpected = ref.load_state_dict(first["init"], strict=False)
    assert not unexpected, unexpected
    assert all("num_batches_tracked" in m for m in missing), missing
    ref.train()
    logits = ref(data.x, data.edge_index)
    loss = F.cross_entropy(logits[data.train_mask], data.y[data.train_mask])
    loss.backward()
    for rank_out in ranks:
        out = rank_out[case]
        assert_close("logits", logits.detach()[out["ids"]], out["logits"], rtol=1e-5)
        for name, p in ref.named_parameters():
            # atol: a bias right before batch norm has a zero gradient up to rounding
            assert_close(f"grad {name}", p.grad, out["grads"][name], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("world", [2, 4])
def test_halo_bytes_equal_comm_volume(runs, world):
    _, results = runs
    ranks, report = results[world]
    case = ("gcn", "none", True)
    # GCN exchanges rows after its linear map (hidden 8, then 4 classes), except its first layer:
    # 12 input features <= 2 x 8, so it aggregates the features first, which need no gradient
    # (no backward exchange)
    widths = {"layer0": (12, False), "layer1": (4, True)}
    for tag, (width, backward) in widths.items():
        for key in ("fwd_sent", "fwd_received", "bwd_sent", "bwd_received"):
            expected = report["comm_volume"] * width * 4 if backward or key.startswith("fwd") else 0
            total = sum(r[case]["bytes"][tag].get(key, 0) for r in ranks)
            assert total == expected, (tag, key, total, expected)
