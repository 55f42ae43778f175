"""Link prediction's model: an encoder (any registered or user model), an edge decoder, and learned input rows
for a featureless graph.

    model = LinkModel(encoder, decoder("mlp", 256), embedding)   # model(graph, x): every owned node's row
    logits = model.decoder(h_u, h_v)                             # one logit per pair

The decoder sees the two endpoint rows of each pair, wherever their owners are
(:mod:`gnndist.tasks.pairs` brings them): it is local arithmetic on rows, with no dropout (OGB's link
baselines use none in the predictor), so its result does not depend on the ranks.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

DECODERS = ("dot", "mlp", "mlp-norm", "mlp-res")


class DotDecoder(nn.Module):
    """GAE's inner product: ``<h_u, h_v>`` (Kipf & Welling 2016). No parameters.

    Shapes:
        hu, hv ``[n, d]`` -> ``[n]``
    """

    def forward(self, hu: Tensor, hv: Tensor) -> Tensor:
        return (hu * hv).sum(dim=-1)


class MLPDecoder(nn.Module):
    """OGB's ``LinkPredictor``: the Hadamard product ``h_u * h_v``, then ``layers`` linear layers with ReLU
    between them, to one logit; with ``norm``, a LayerNorm after each hidden layer, before its ReLU (Refined-GAE's
    ``Hadamard_MLPPredictor`` with ``--norm`` alone, their citation2 command: ``--decoder mlp-norm``).

    Args:
        width: the encoder's output width ``d`` (and the hidden width of the MLP).
        layers: linear layers (default 3, OGB's).
        norm: a LayerNorm of ``width`` after every linear layer but the last.

    Shapes:
        hu, hv ``[n, d]`` -> ``[n]``
    """

    def __init__(self, width: int, layers: int = 3, norm: bool = False):
        super().__init__()
        widths = [width] * layers + [1]
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(layers - 1)) if norm else None

    def forward(self, hu: Tensor, hv: Tensor) -> Tensor:
        x = hu * hv
        for i, lin in enumerate(self.lins[:-1]):
            x = lin(x)
            x = F.relu(self.norms[i](x) if self.norms is not None else x)
        return self.lins[-1](x).view(-1)


class ResMLPDecoder(nn.Module):
    """Refined-GAE's ``Hadamard_MLPPredictor`` (``--scale --res --norm``, Ma et al. 2025): the Hadamard product's
    LayerNorm ``p = LayerNorm(h_u * h_v)``, then ``layers - 1`` blocks ``x = relu(LayerNorm(lin(x) + p))`` (each
    block's residual is ``p``, the scaled product, as their ``ori``) and a last linear layer to one logit.

    Without their dropout between the blocks: the decoder's arithmetic stays local to a pair's rows, so its result
    does not depend on the ranks (masks over pairs would have to be hashed by pair, which is not offered).

    Args:
        width: the encoder's output width ``d`` (and every block's).
        layers: linear layers, the last included (their collab command: 5).

    Shapes:
        hu, hv ``[n, d]`` -> ``[n]``
    """

    def __init__(self, width: int, layers: int = 5):
        super().__init__()
        self.scale = nn.LayerNorm(width)
        self.lins = nn.ModuleList(nn.Linear(width, width) for _ in range(layers - 1))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(layers - 1))
        self.out = nn.Linear(width, 1)

    def forward(self, hu: Tensor, hv: Tensor) -> Tensor:
        x = product = self.scale(hu * hv)
        for lin, norm in zip(self.lins, self.norms):
            x = F.relu(norm(lin(x) + product))
        return self.out(x).view(-1)


def decoder(name: str, width: int, layers: int = 3) -> nn.Module:
    """The decoder ``--decoder name`` for encoder rows of width ``width`` (``layers``: the MLP's linear layers)."""
    if name == "dot":
        return DotDecoder()
    if name in ("mlp", "mlp-norm"):
        return MLPDecoder(width, layers, norm=name == "mlp-norm")
    if name == "mlp-res":
        return ResMLPDecoder(width, layers)
    raise ValueError(f"unknown decoder {name!r}; known: {', '.join(DECODERS)}")


class LinkModel(nn.Module):
    """An encoder and an edge decoder; ``forward`` is the encoder's (every owned node's row).

    Args:
        encoder: a module taking ``(graph, x)`` -> ``[n_owned, d]``.
        decoder: a module taking ``(h_u, h_v)`` -> one logit per pair.
        embedding: a :class:`~gnndist.nn.NodeEmbedding` whose rows are the input of a featureless graph, or None.

    Shapes:
        x ``[n_owned, F]`` -> ``[n_owned, d]``
    """

    def __init__(self, encoder: nn.Module, decoder: nn.Module, embedding: nn.Module | None = None):
        super().__init__()
        self.encoder, self.decoder, self.embedding = encoder, decoder, embedding

    def forward(self, graph, x: Tensor) -> Tensor:
        if self.embedding is not None:
            x = self.embedding(graph, x)
        return self.encoder(graph, x)
