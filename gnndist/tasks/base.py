"""The interface every task implements, and the registry that names them (``--task``).

A task is what a run learns on a partition. It declares, in one class: what it stores in a part (:attr:`Task.parts`:
components of :mod:`gnndist.partition.components`, each with its arrays, META.json key, disk bytes and memory
term), the encoder's widths and the model trained (:meth:`Task.wrap`), the steps of an epoch and their loss, its
metrics and their evaluation, and what ``gnndist predict`` writes of its model (:attr:`Task.outputs`). The
trainer, the checkpoints, early stopping, the log, the summary, the partition writer, a rank's reader and
``gnndist predict`` call only what is declared here.

    @register_task
    class DegreeTask(Task):
        name = "degree"
        parts = (DEGREE_TARGETS,)               # a Component: its writer, reader, disk bytes, memory term
        outputs = ("values", "embedding")
        ...

:data:`TASKS` maps each registered name to its class; :func:`gnndist.tasks.task_for` builds the run's one.
Registering a task registers its components with the partition writer (:func:`register_task`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, NamedTuple

import numpy as np
from torch import Tensor

from gnndist.errors import UserError
from gnndist.partition.components import Component, register_component

if TYPE_CHECKING:
    from torch import nn


class Placed(NamedTuple):
    """Rows ``gnndist predict`` writes at their own positions (not one per owned node): ``rows`` ``[n, C]`` at
    positions ``ids`` ``[n]`` of an output of ``count`` rows."""

    rows: Tensor
    ids: np.ndarray
    count: int


class Task:
    """What a run learns: its model's widths and head, its loss per step and its metrics.

    Lifecycle: built on every rank at once from this rank's :class:`~gnndist.graph.DistGraph` and the training
    config (``Task(graph, cfg)``; it may communicate), then :meth:`resolved`, :meth:`widths` and :meth:`wrap`
    once, :meth:`steps` and :meth:`loss` per epoch, :meth:`evaluate` where the trainer evaluates.

    Attributes:
        name: the registry name (``--task``).
        noun: what its checkpoint is, in a message (``"a node model"``).
        parts: the part components it stores and reads (:mod:`gnndist.partition.components`): their arrays,
            META.json keys (a partition holds the task's where it holds every key), disk bytes and memory terms.
        outputs: what ``gnndist predict --what`` writes of its model (:meth:`predicted`); scored: those whose
            written rows give back the run's metric (:meth:`written_metrics`).
        metric: the metric that selects the model; metrics: every metric :meth:`evaluate` reports, ``metric`` first.
    """

    name: ClassVar[str] = ""
    noun: ClassVar[str] = ""
    parts: ClassVar[tuple[Component, ...]] = ()
    outputs: ClassVar[tuple[str, ...]] = ("embedding",)
    scored: ClassVar[tuple[str, ...]] = ()
    metric: str = ""
    metrics: tuple[str, ...] = ()

    @classmethod
    def stored_in(cls, meta: dict) -> bool:
        """Whether the partition of META.json ``meta`` stores what this task reads (every part's META.json key)."""
        return all(c.meta_key in meta for c in cls.parts if c.meta_key is not None)

    def resolved(self, cfg):
        """``cfg`` with ``--task`` (and whatever ``auto`` option the task decides) written out."""
        raise NotImplementedError

    def widths(self, hidden: int) -> tuple[int, int]:
        """The encoder's input and output widths, for ``--hidden`` ``hidden``."""
        raise NotImplementedError

    def wrap(self, encoder: nn.Module, cfg, seed: int) -> nn.Module:
        """The model trained around ``encoder`` (its head, decoder or learned input rows)."""
        raise NotImplementedError

    def encoder(self, model: nn.Module) -> nn.Module:
        """The encoder of the model trained."""
        raise NotImplementedError

    def steps(self, epoch: int) -> int:
        """Optimisation steps of ``epoch``: one by default (a node task: one, over every training node)."""
        return 1

    def loss(self, model: nn.Module, epoch: int, step: int) -> Tensor:
        """This rank's share of the global loss of one step (the ranks' shares add up to it)."""
        raise NotImplementedError

    def evaluate(self, model: nn.Module, autocast) -> dict[str, float]:
        """Every metric on train / val / test over every rank, keyed ``<split>_<metric>`` (collective)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ gnndist predict
    def check_output(self, what: str, layer: int | None = None, valedges: bool = False) -> None:
        """One line where ``--what`` (with ``--layer``, ``--use-valedges-as-input``) is not an output of this task
        (every rank alike, before any work)."""
        if valedges:
            raise UserError(f"--use-valedges-as-input: the checkpoint is {self.noun}; the flag runs a link "
                            f"predictor's encoder over training + validation edges")
        if what not in self.outputs:
            raise UserError(f"--what {what}: the checkpoint is {self.noun}; it writes --what "
                            f"{' or '.join(self.outputs)}")

    def predict_graph(self, graph, dist, valedges: bool = False):
        """The graph ``gnndist predict`` runs the model on (``dist``: its layout): ``graph`` itself."""
        return graph

    def predicted(self, model: nn.Module, out: Tensor, what: str, pairs: str | None = None) -> Tensor | Placed:
        """What ``gnndist predict`` writes of the model's output ``out`` (``[n_owned, *]``, or a layer's): one row
        per owned node (a tensor ``[n_owned, C]``), or rows at their own positions (:class:`Placed`).
        ``embedding``: the rows as they are."""
        return out.reshape(out.shape[0], -1)

    def written_metrics(self, written: Tensor) -> dict:
        """The run's metric recomputed from the rows written of a :attr:`scored` output (``[n_owned, C]``, as read
        back; collective), with its name under ``metric``."""
        raise NotImplementedError


TASKS: dict[str, type[Task]] = {}


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: register ``cls`` under its ``name`` in :data:`TASKS` (a name taken twice: an error), and its
    part components with the partition writer and reader
    (:func:`~gnndist.partition.components.register_component`)."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    held = TASKS.get(cls.name, cls)
    if (held.__module__, held.__qualname__) != (cls.__module__, cls.__qualname__):  # a module reloaded: replaced
        raise ValueError(f"task {cls.name!r} is registered twice ({TASKS[cls.name].__name__}, {cls.__name__})")
    for component in cls.parts:
        register_component(component)
    TASKS[cls.name] = cls
    return cls


__all__ = ["TASKS", "Placed", "Task", "register_task"]
