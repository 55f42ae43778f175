"""Layers (``gnndist.nn.conv``) and models (``gnndist.nn.models``, with the ``--model`` registry of specs).

Every layer takes ``(graph, x)`` and knows nothing about distribution. What the two subpackages export
(their ``__all__``) is exported here too.
"""

from gnndist.nn import conv, models
from gnndist.nn.conv import *  # noqa: F403  (their __all__: one list of names each)
from gnndist.nn.models import *  # noqa: F403
from gnndist.nn.node_embedding import NodeEmbedding
from gnndist.nn.norm import DistBatchNorm

__all__ = [*conv.__all__, *models.__all__, "DistBatchNorm", "NodeEmbedding"]
