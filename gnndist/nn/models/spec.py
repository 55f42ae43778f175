"""A registered model is a spec: its builder, its preset and what it can do (torchtitan's ``ModelSpec``).

Whatever needs to know what a model can do reads its spec: the trainer (layouts, half precision,
parameter groups), ``predict --what embedding`` (representation layers), ``export --format pyg`` (its
PyG twin), the modelled epoch (its cost-model form) and the CLI's ``--model`` help. Nothing probes a
model with ``hasattr`` or keeps a set of model names. :func:`register_model` is the one way in, for a
user's model and the built-in ones (:mod:`gnndist.nn.models`) alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from torch import nn

from gnndist.errors import UserError
from gnndist.nn.models.gnn import ConvFactory
from gnndist.nn.models.residual_gnn import ResidualGNN

# builder(in_channels, hidden, out_channels, layers, dropout, norm, **inputs) -> module taking (graph, x), where
# inputs are the ones its spec declares (ModelSpec.inputs)
Builder = Callable[..., nn.Module]
# config fields by section, e.g. {"model": {"hidden": 64}, "optim": {"lr": 0.005}}
Preset = dict[str, dict[str, object]]
HETERO_INPUTS = ("graph", "num_bases", "seed", "embedding")  # a typed graph's model: the rank's graph, --num-bases, ...
EDGE_INPUTS = ("edge_dim",)  # a model reading edge features: their width
BIAS_INPUTS = ("bias",)  # a model whose layers' bias can be left out (--no-bias)


def convs(model: nn.Module) -> list[nn.Module]:
    """The model's ``convs``: the representation layers of :class:`~gnndist.nn.GNN` and most models (the default)."""
    return list(model.convs)


def blocks(model: nn.Module) -> list[nn.Module]:
    """The model's ``blocks`` (:class:`~gnndist.nn.RevGNN`'s reversible blocks)."""
    return list(model.blocks)


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: how to build it and what it can do.

    Args:
        name: ``--model name``.
        builder: ``(in_channels, hidden, out_channels, layers, dropout, norm, **inputs) -> module`` taking
            ``(graph, x)``; ``inputs`` are those the capabilities below add (:attr:`inputs`).
        preset: the model's own defaults as config fields by section, used where no flag is given
            (:func:`gnndist.presets.compose`; default none).
        layouts: the ``--strategy`` values it runs on (default ``None``: every one).
        hetero: built for a typed graph: the builder also gets ``graph=`` (the rank's), ``num_bases=``,
            ``seed=`` and ``embedding=`` (default ``False``).
        edge_features: reads ``graph.edge_attr``: the builder also gets ``edge_dim=`` (default ``False``).
        bias: its layers' bias can be left out (``--no-bias``): the builder also gets ``bias=`` (default ``False``).
        half_precision: why it cannot run under ``--precision bf16|fp16`` (default ``None``: it can).
        recompute: its blocks can be recomputed in backward (``--recompute``): the module it builds has a
            ``recompute`` switch; a string says why ``--recompute`` does not apply (default ``False``).
        param_groups: ``(model, weight_decay) -> Adam's parameter groups`` where the model has its own
            weight decay per group (default ``None``: one group).
        representation: ``model -> its per-layer modules``, whose outputs ``predict --what embedding
            --layer K`` writes (default :func:`convs`).
        residual: the layer ``(hidden, hidden) -> module`` of each block of ``--arch residual``
            (:class:`~gnndist.nn.models.residual_gnn.ResidualGNN`; default ``None``: its own architecture only).
        twin: ``"module.Class"`` of its exact twin in PyG layers for ``export --format pyg`` (default ``None``:
            none, or a model of :class:`~gnndist.nn.PyGAdapter` layers).
        cost: its form in the cost model, :func:`gnndist.cost.model_layers` (``"gcn"`` or ``"sage"``), for the
            modelled epoch and ``gnndist bench`` (default ``None``: not modelled).
    """

    name: str
    builder: Builder
    preset: Preset = field(default_factory=dict)
    layouts: tuple[str, ...] | None = None
    hetero: bool = False
    edge_features: bool = False
    bias: bool = False
    half_precision: str | None = None
    recompute: bool | str = False
    param_groups: Callable[[nn.Module, float], list[dict]] | None = None
    representation: Callable[[nn.Module], Sequence[nn.Module]] = convs
    residual: ConvFactory | None = None
    twin: str | None = None
    cost: str | None = None

    @property
    def inputs(self) -> tuple[str, ...]:
        """The keyword inputs its builder takes beside the six widths and settings."""
        return ((HETERO_INPUTS if self.hetero else ()) + (EDGE_INPUTS if self.edge_features else ())
                + (BIAS_INPUTS if self.bias else ()))

    def check_layout(self, strategy: str) -> None:
        """One line when the model does not run on ``--strategy strategy``."""
        if self.layouts is not None and strategy not in self.layouts:
            raise UserError(f"--model {self.name} runs on --strategy {' or '.join(self.layouts)} only, not --strategy "
                            f"{strategy}")

    def check_precision(self, precision: str) -> None:
        """One line when the model cannot run in ``--precision precision``."""
        if precision != "fp32" and self.half_precision is not None:
            raise UserError(f"--precision {precision}: --model {self.name} cannot run in half precision: "
                            f"{self.half_precision}; use --precision fp32")

    def layers(self, model: nn.Module, arch: str = "plain") -> list[nn.Module]:
        """The representation layers of ``model``, built by this spec with ``--arch arch``."""
        return convs(model) if arch == "residual" else list(self.representation(model))

    def optimiser_groups(self, model: nn.Module, weight_decay: float) -> list | None:
        """Adam's parameter groups of ``model`` where the spec declares its own; ``None``: one group."""
        return self.param_groups(model, weight_decay) if self.param_groups is not None else None

    def build(self, in_channels: int, hidden: int, out_channels: int, layers: int, dropout: float, norm: str = "none",
              recompute: bool = False, arch: str = "plain", **inputs) -> nn.Module:
        """The model with these widths and depth (see :func:`build_model`)."""
        if self.hetero:
            graph = inputs.get("graph")
            if graph is None or graph.hetero is None:
                raise UserError(f"--model {self.name} is for a heterogeneous graph (typed nodes and relations); this "
                                f"partition has one node type")
            if arch != "plain" or recompute:
                raise UserError(f"--model {self.name} has its own architecture: --arch residual and --recompute do "
                                f"not apply")
        elif inputs.get("num_bases"):
            raise UserError(f"--num-bases is for --model {_names(lambda s: s.hetero)}, not --model {self.name}")
        if inputs.get("bias") is False and (not self.bias or arch != "plain"):
            raise UserError(f"--no-bias is for --model {_names(lambda s: s.bias)} (--arch plain), not --model "
                            f"{self.name}{' --arch ' + arch if arch != 'plain' else ''}")
        if arch == "residual":
            if self.residual is None:
                raise UserError(f"--arch residual is for --model {_names(lambda s: s.residual is not None)}; --model "
                                f"{self.name} has its own architecture (--arch plain)")
            model = ResidualGNN(self.residual, in_channels, hidden, out_channels, layers, dropout, norm)
        else:
            if self.edge_features and not inputs.get("edge_dim"):
                raise UserError(f"--model {self.name} reads edge features, and this dataset's partition has none")
            model = self.builder(in_channels, hidden, out_channels, layers, dropout, norm,
                                 **{k: inputs[k] for k in self.inputs if k in inputs})
        if recompute:
            if self.recompute is not True and arch == "plain":
                raise UserError(self.recompute or f"--recompute is for the deep models "
                                f"({_names(lambda s: s.recompute is True)}) and --arch residual; --model {self.name} "
                                f"has no blocks to recompute")
            model.recompute = True
        return model


MODELS: dict[str, ModelSpec] = {}  # --model name -> its spec: the one registry


def _names(declares: Callable[[ModelSpec], bool]) -> str:
    """The registered models whose spec ``declares`` a capability, for a one-line error."""
    return ", ".join(sorted(n for n, s in MODELS.items() if declares(s)))


def register_model(name: str, builder: Builder, preset: Preset | None = None, **capabilities) -> ModelSpec:
    """Make ``--model name`` build ``builder(in_channels, hidden, out_channels, layers, dropout, norm)``.

    ``preset``: the model's own defaults as config fields by section, used where the user passes no
    flag, e.g. ``{"model": {"hidden": 64}, "optim": {"lr": 0.005}}`` (applied by :func:`gnndist.presets.compose`).
    ``capabilities``: what the model can do, the fields of :class:`ModelSpec` (``layouts``, ``hetero``,
    ``edge_features``, ``bias``, ``half_precision``, ``recompute``, ``param_groups``, ``representation``, ``residual``,
    ``twin``, ``cost``). Returns the spec, which :data:`MODELS` now holds.
    """
    spec = ModelSpec(name, builder, dict(preset or {}), **capabilities)
    MODELS[name] = spec
    return spec


def model_spec(name: str) -> ModelSpec:
    """The spec of ``--model name``, or one line naming the registered models."""
    if name not in MODELS:
        raise UserError(f"unknown --model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def build_model(name: str, in_channels: int, hidden: int, out_channels: int, layers: int, dropout: float,
                norm: str = "none", recompute: bool = False, arch: str = "plain", **inputs) -> nn.Module:
    """The model ``--model name`` with the given widths and depth; ``recompute`` checkpoints every block.

    ``arch``: ``"plain"`` (the model's own layers) or ``"residual"`` (``--arch``: its layer in
    :class:`~gnndist.nn.models.residual_gnn.ResidualGNN`'s blocks). ``inputs``: what the graph gives the models
    whose spec asks for it (:attr:`ModelSpec.inputs`): ``edge_dim`` (the width of the partition's edge
    features, 0: none), ``bias`` (``--bias``; ``False`` for a model that does not declare it is one line), and
    for a typed graph's models ``graph``, ``num_bases``, ``seed`` (of the embeddings) and ``embedding``
    (``--embedding``: learn or zero); the others are not passed on.
    """
    return model_spec(name).build(in_channels, hidden, out_channels, layers, dropout, norm, recompute, arch, **inputs)


def models_help() -> str:
    """``--model``'s help: every registered model, with what its spec declares beyond the defaults."""

    def entry(s: ModelSpec) -> str:
        notes = [note for note, declared in (
            ("typed graphs", s.hetero), ("edge features", s.edge_features),
            (f"--strategy {'/'.join(s.layouts or ())}", s.layouts is not None), ("preset", bool(s.preset)),
            ("--recompute", s.recompute is True), ("--arch residual", s.residual is not None),
            ("fp32 only", s.half_precision is not None)) if declared]
        return f"{s.name} ({', '.join(notes)})" if notes else s.name

    return (f"the model: {', '.join(entry(s) for s in MODELS.values())} (gnndist.nn.register_model adds one); its "
            f"preset sets the defaults of the flags not given")
