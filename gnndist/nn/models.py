"""Models built from a depth and a layer list; a registry maps ``--model`` names to conv factories."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch.nn.functional as F
from torch import Tensor, nn

from gnndist.cost import aggregate_first
from gnndist.kernels.csr import rows2d
from gnndist.nn.gcn_conv import GCNConv
from gnndist.nn.gin_conv import GINConv
from gnndist.nn.norm import apply_norm, make_norm
from gnndist.nn.sage_conv import SAGEConv

ConvFactory = Callable[[int, int], nn.Module]
# builder(in_channels, hidden, out_channels, layers, dropout, norm) -> module taking (graph, x)
ModelBuilder = Callable[[int, int, int, int, float, str], nn.Module]


def _gin(i: int, o: int) -> nn.Module:
    return GINConv(nn.Sequential(nn.Linear(i, o), nn.ReLU(), nn.Linear(o, o)))


MODELS: dict[str, ModelBuilder] = {}
Preset = dict[str, dict[str, object]]  # config fields by section, e.g. {"model": {"hidden": 64}, "optim": {"lr": 0.005}}
PRESETS: dict[str, Preset] = {}  # a registered model's own defaults, applied by gnndist.presets.compose


EDGE_MODELS: set[str] = set()  # models that read the partition's edge features (builder gets edge_dim=)
HETERO_MODELS: set[str] = set()  # models of a typed graph (builder gets graph=, num_bases=, seed=, embedding=; 1d)
RESIDUAL_CONVS: dict[str, ConvFactory] = {}  # models with --arch residual: the layer of each block


def register_model(name: str, builder: ModelBuilder, preset: Preset | None = None,
                   edge_features: bool = False, residual: ConvFactory | None = None, hetero: bool = False) -> None:
    """Make ``--model name`` build ``builder(in_channels, hidden, out_channels, layers, dropout, norm)``.

    ``preset``: the model's own defaults as config fields by section, used where the user passes no
    flag, e.g. ``{"model": {"hidden": 64}, "optim": {"lr": 0.005}}`` (applied by :func:`gnndist.presets.compose`).
    ``edge_features``: the model reads ``graph.edge_attr``; its builder also gets ``edge_dim=``.
    ``residual``: the layer ``(hidden, hidden) -> module`` of each block of ``--arch residual``
    (:class:`~gnndist.nn.residual_gnn.ResidualGNN`); without it the model has only its own architecture.
    ``hetero``: the model is built for a typed graph: its builder also gets ``graph=`` (the rank's),
    ``num_bases=``, ``seed=`` and ``embedding=``, and it runs on ``--strategy 1d`` (its relations aggregate on the halo).
    """
    MODELS[name] = builder
    if hetero:
        HETERO_MODELS.add(name)
    if preset is not None:
        PRESETS[name] = preset
    if edge_features:
        EDGE_MODELS.add(name)
    if residual is not None:
        RESIDUAL_CONVS[name] = residual


class GNN(nn.Module):
    """``layers`` convolutions with dropout before each and norm + ReLU between them.

    Args:
        conv: factory ``(in_channels, out_channels) -> layer``; layers take ``(graph, x)``.
        in_channels, hidden, out_channels: widths.
        layers: depth (>= 1).
        dropout: dropout probability; masks come from ``graph.dropout`` (partition-invariant).
        norm: ``"none"``, ``"batch"`` (global statistics) or ``"layer"``.

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, conv: ConvFactory, in_channels: int, hidden: int, out_channels: int,
                 layers: int = 2, dropout: float = 0.5, norm: str = "none"):
        super().__init__()
        widths = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(conv(a, b) for a, b in zip(widths[:-1], widths[1:]))
        for i, c in enumerate(self.convs):
            c.tag = f"layer{i}"
        if isinstance(self.convs[0], GCNConv):  # its input, the features, needs no gradient
            self.convs[0].aggregate_first = aggregate_first(in_channels, widths[1])
        self.norms = nn.ModuleList(make_norm(norm, hidden) for _ in range(layers - 1))
        self.dropout = dropout

    def forward(self, graph, x: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = graph.dropout(x, self.dropout, key=i, training=self.training)
            x = conv(graph, x)
            if i < len(self.convs) - 1:
                x = F.relu(apply_norm(self.norms[i], graph, x))
        return x


def _gat_heads(i: int, o: int, heads: int = 8) -> nn.Module:
    """The residual blocks' GAT layer: ``heads`` heads of ``o // heads``, concatenated (no attention dropout), then
    a linear map mixing the heads (the first linear of the paper's feed-forward module)."""
    from gnndist.errors import UserError
    from gnndist.nn.gat_conv import GATConv
    from gnndist.nn.residual_gnn import ThenLinear

    if o % heads:
        raise UserError(f"--arch residual --model gat: --hidden {o} must be a multiple of its {heads} heads")
    return ThenLinear(GATConv(i, o // heads, heads), o, o)


for _name, _conv, _block in (("gcn", GCNConv, GCNConv), ("sage", SAGEConv, SAGEConv),
                             ("gin", _gin, lambda i, o: GINConv(nn.Linear(i, o)))):
    register_model(_name, partial(GNN, _conv), residual=_block)


def _gen(i: int, o: int) -> nn.Module:
    from gnndist.nn.gen_conv import GENConv

    return GENConv(i, o, learn_t=True)


def _gat(*args) -> nn.Module:
    from gnndist.nn.gat import GAT

    return GAT(*args)


register_model("gen", partial(GNN, _gen))


class GINE(nn.Module):
    """GINEConv layers (Hu et al. 2020, https://arxiv.org/abs/1905.12265) on node and edge features.

    A linear map to ``hidden``, then ``layers`` × (dropout, ``GINEConv`` with an
    ``edge_dim -> hidden`` edge encoder, ReLU), then a linear head. The convolutions are
    PyG's, run through :class:`~gnndist.nn.PyGAdapter` with ``graph.edge_attr`` (the
    partition's edge features, one row per local edge): exact on any number of ranks.
    ``--model gine``, e.g. for ogbn-proteins (8 edge features).

    Shapes:
        x ``[n_owned, in_channels]``, graph.edge_attr ``[nnz_local, edge_dim]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 2, dropout: float = 0.5,
                 norm: str = "none", edge_dim: int = 1):
        from torch_geometric.nn import GINEConv

        from gnndist.nn.pyg_adapter import PyGAdapter

        super().__init__()
        self.inp = nn.Linear(in_channels, hidden)
        self.convs = nn.ModuleList(
            PyGAdapter(GINEConv(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)),
                                edge_dim=edge_dim))
            for _ in range(layers))
        self.norms = nn.ModuleList(make_norm(norm, hidden) for _ in range(layers))
        self.out = nn.Linear(hidden, out_channels)
        self.dropout = dropout

    def forward(self, graph, x: Tensor) -> Tensor:
        x = self.inp(x)
        ea = rows2d(graph.edge_attr).to(x.dtype)  # [nnz_local, edge_dim]
        for i, conv in enumerate(self.convs):
            x = graph.dropout(x, self.dropout, key=i, training=self.training)
            x = F.relu(apply_norm(self.norms[i], graph, conv(graph, x, edge_attr=ea)))
        return self.out(x)


register_model("gine", GINE, edge_features=True)


def _gcn2(*args) -> nn.Module:
    from gnndist.nn.deep import GCNII

    return GCNII(*args)


def _resgcn(*args) -> nn.Module:
    from gnndist.nn.deep import ResGCN

    return ResGCN(*args)


def _revgnn(*args) -> nn.Module:
    from gnndist.nn.rev_gnn import RevGNN

    return RevGNN(*args)


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


def _rgcn(*args, **kw) -> nn.Module:
    from gnndist.nn.rgcn import RGCN

    graph = kw.pop("graph")
    return RGCN(graph, *args, **kw)


register_model("gat", _gat, preset=GAT_PRESET, residual=_gat_heads)
register_model("rgcn", _rgcn, hetero=True)
register_model("gcn2", _gcn2, preset=GCN2_PRESET)
register_model("resgcn", _resgcn, preset=DEEP_RESIDUAL_PRESET)
register_model("revgnn", _revgnn, preset=DEEP_RESIDUAL_PRESET)


def build_model(name: str, in_channels: int, hidden: int, out_channels: int, layers: int,
                dropout: float, norm: str = "none", recompute: bool = False, edge_dim: int = 0,
                arch: str = "plain", graph=None, num_bases: int = 0, seed: int = 0,
                embedding: str = "learn") -> nn.Module:
    """The model ``--model name`` with the given widths and depth; ``recompute`` checkpoints every block.

    ``edge_dim``: width of the partition's edge features (0: none), for the models that read them.
    ``arch``: ``"plain"`` (the model's own layers) or ``"residual"`` (``--arch``: its layer in
    :class:`~gnndist.nn.residual_gnn.ResidualGNN`'s blocks).
    ``graph``, ``num_bases``, ``seed``, ``embedding``: the rank's graph, ``--num-bases``, the seed of the embeddings
    and ``--embedding`` (learn or zero), for the models of a typed graph (``HETERO_MODELS``).
    """
    from gnndist.errors import UserError

    if name not in MODELS:
        raise UserError(f"unknown --model {name!r}; known: {', '.join(sorted(MODELS))}")
    if name in HETERO_MODELS:
        if graph is None or graph.hetero is None:
            raise UserError(f"--model {name} is for a heterogeneous graph (typed nodes and relations); this "
                            f"partition has one node type")
        if arch != "plain" or recompute:
            raise UserError(f"--model {name} has its own architecture: --arch residual and --recompute do not apply")
        return MODELS[name](in_channels, hidden, out_channels, layers, dropout, norm, graph=graph,
                            num_bases=num_bases, seed=seed, embedding=embedding)
    if num_bases:
        raise UserError(f"--num-bases is for --model {', '.join(sorted(HETERO_MODELS))}, not --model {name}")
    if arch == "residual":
        from gnndist.nn.residual_gnn import ResidualGNN

        if name not in RESIDUAL_CONVS:
            raise UserError(f"--arch residual is for --model {', '.join(sorted(RESIDUAL_CONVS))}; --model {name} has "
                            f"its own architecture (--arch plain)")
        model = ResidualGNN(RESIDUAL_CONVS[name], in_channels, hidden, out_channels, layers, dropout, norm)
    elif name in EDGE_MODELS:
        if not edge_dim:
            raise UserError(f"--model {name} reads edge features, and this dataset's partition has none")
        model = MODELS[name](in_channels, hidden, out_channels, layers, dropout, norm, edge_dim=edge_dim)
    else:
        model = MODELS[name](in_channels, hidden, out_channels, layers, dropout, norm)
    if recompute:
        if not hasattr(model, "recompute"):
            raise UserError(f"--recompute is for the deep models (gcn2, resgcn); --model {name} has no blocks to "
                            f"recompute")
        model.recompute = True
    return model
