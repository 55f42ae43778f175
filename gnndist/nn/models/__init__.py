"""Models built from a depth and a layer list, and the registry of ``--model`` names: one spec per model.

The built-in models are registered here, each with what it can do (:class:`~gnndist.nn.models.spec.ModelSpec`),
through the same :func:`register_model` a user calls.
"""

from functools import partial

from torch import nn

from gnndist.nn.conv.gcn_conv import GCNConv
from gnndist.nn.conv.gen_conv import GENConv
from gnndist.nn.conv.gin_conv import GINConv
from gnndist.nn.conv.pyg_adapter import SCATTER_IN_ROWS_DTYPE
from gnndist.nn.conv.sage_conv import SAGEConv
from gnndist.nn.models.deep import GCNII, ResGCN
from gnndist.nn.models.gat import GAT
from gnndist.nn.models.gine import GINE
from gnndist.nn.models.gnn import GNN
from gnndist.nn.models.link import DotDecoder, LinkModel, MLPDecoder, ResMLPDecoder
from gnndist.nn.models.prop_gcn import PropGCN
from gnndist.nn.models.residual_gnn import ResidualGNN, gat_heads
from gnndist.nn.models.rev_gnn import GroupAddRev, RevGNN
from gnndist.nn.models.rgcn import RGCN
from gnndist.nn.models.spec import (
    MODELS,
    ModelSpec,
    Preset,
    blocks,
    build_model,
    model_spec,
    models_help,
    register_model,
)

__all__ = ["GAT", "GCNII", "GINE", "GNN", "MODELS", "RGCN", "DotDecoder", "GroupAddRev", "LinkModel", "MLPDecoder",
           "ModelSpec", "Preset", "PropGCN", "ResGCN", "ResMLPDecoder", "ResidualGNN", "RevGNN", "build_model",
           "model_spec", "models_help", "register_model"]

# GAT's Cora recipe (Velickovic et al. 2018): 8 heads of 8, dropout 0.6, lr 0.005
GAT_PRESET: Preset = {"model": {"hidden": 64, "dropout": 0.6}, "optim": {"lr": 0.005}}
# GCNII's Cora recipe (Chen et al. 2020): 64 layers of 64, dropout 0.6, 1000 epochs
GCN2_PRESET: Preset = {"model": {"layers": 64, "hidden": 64, "dropout": 0.6},
                       "optim": {"lr": 0.01, "weight_decay": 5e-4, "epochs": 1000}}
# ResGCN+ and RevGNN on Coauthor-size graphs: 7 layers of 64, dropout 0.2, layer norm, lr 0.005. Layer norm:
# batch norm's running variance, from 1 at momentum 0.1, needs hundreds of epochs to reach the ~1e-4
# variance of row-normalised features, and evaluation collapses meanwhile.
DEEP_RESIDUAL_PRESET: Preset = {"model": {"layers": 7, "hidden": 64, "dropout": 0.2, "norm": "layer"},
                                "optim": {"lr": 0.005, "weight_decay": 5e-4}}
# SAGE full-batch: Adam at lr 0.03 reached the time-to-accuracy target in 0.36-0.57x the epochs of 0.01 with test
# accuracy at best validation +0.2 to +0.4 points (Amazon Photo, Coauthor CS, Flickr at h256, 2-3 seeds; lr 0.1
# was worse on both counts; Cora h16 alike): docs/full_graph_or_minibatch.md, "Learning rate"
SAGE_PRESET: Preset = {"optim": {"lr": 0.03}}
PYG_MODELS = "torch_geometric.nn.models"  # the twins PyG has; gnndist.pyg_twins holds the others
TWINS = "gnndist.pyg_twins"


def _gin(i: int, o: int) -> nn.Module:
    return GINConv(nn.Sequential(nn.Linear(i, o), nn.ReLU(), nn.Linear(o, o)))


def _gin_block(i: int, o: int) -> nn.Module:
    return GINConv(nn.Linear(i, o))


def _gen(i: int, o: int) -> nn.Module:
    return GENConv(i, o, learn_t=True)


register_model("gcn", partial(GNN, GCNConv), residual=GCNConv, bias=True, twin=f"{PYG_MODELS}.GCN", cost="gcn")
register_model("sage", partial(GNN, SAGEConv), SAGE_PRESET, residual=SAGEConv, bias=True,
               twin=f"{PYG_MODELS}.GraphSAGE", cost="sage")
register_model("propgcn", PropGCN, {"model": {"layers": 4, "dropout": 0.2, "norm": "layer"}})
register_model("gin", partial(GNN, _gin), residual=_gin_block, twin=f"{PYG_MODELS}.GIN")
register_model("gen", partial(GNN, _gen))
register_model("gine", GINE, edge_features=True, half_precision=SCATTER_IN_ROWS_DTYPE.format(conv="GINEConv"),
               twin=f"{TWINS}.GINE")
register_model("gat", GAT, GAT_PRESET, residual=gat_heads, twin=f"{TWINS}.GAT")
register_model("rgcn", RGCN, hetero=True, layouts=("1d",), twin=f"{TWINS}.RGCN")
register_model("gcn2", GCNII, GCN2_PRESET, recompute=True, param_groups=GCNII.param_groups, twin=f"{TWINS}.GCNII")
register_model("resgcn", ResGCN, DEEP_RESIDUAL_PRESET, recompute=True)
register_model("revgnn", RevGNN, DEEP_RESIDUAL_PRESET, representation=blocks,
               recompute="--recompute is for non-reversible models: --model revgnn recomputes its blocks already")
