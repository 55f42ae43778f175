"""Tasks: what a run learns. A task declares its data, its head, its loss and its metrics; the trainer, the
checkpoints, ``--runs`` / ``--splits``, early stopping, the log and the summary know no task.

    task = task_for(graph, cfg)                   # --task node|link (auto: the partition's edge split says)
    f_in, f_out = task.widths(hidden)             # the encoder's widths
    model = task.wrap(encoder, cfg, seed)         # the model trained (node: the encoder; link: + decoder)
    for step in range(task.steps(epoch)):
        loss = task.loss(model, epoch, step)      # this rank's share of the global loss
    values = task.evaluate(model, autocast)       # {"train_<m>": ..., "val_<m>": ...} for m in task.metrics

* :class:`~gnndist.tasks.node.NodeTask`: labels and node splits; a classifier head (the encoder's output).
* :class:`~gnndist.tasks.link.LinkTask`: edge splits; an edge decoder over pairs whose rows live on any rank.
* :mod:`~gnndist.tasks.metrics`: the metrics, exact over P ranks (``training`` imports ``tasks``, never the reverse).
"""

from __future__ import annotations

from gnndist.datasets.spec import dataset_spec
from gnndist.errors import UserError
from gnndist.tasks.base import TASKS, Task
from gnndist.tasks.link import LinkTask
from gnndist.tasks.node import NodeTask


def task_name(meta: dict, given: str = "auto") -> str:
    """The task of a run on a partition: ``--task``, else ``link`` where the partition holds an edge split (a link
    dataset's own, or ``--edge-split``'s), else ``node``; a task the partition cannot train is one line."""
    has_link, name = "link" in meta, meta.get("dataset")
    spec = dataset_spec(name)
    if given == "node" and spec is not None and spec.task == "link":
        raise UserError(f"--task node: {name} is a link-prediction dataset (no node labels); use --task link")
    if given == "link" and not has_link:
        from gnndist.tasks.link import LINK_FIX

        raise UserError(f"--task link: the partition of {name} has no edge split; {LINK_FIX}")
    return given if given != "auto" else ("link" if has_link else "node")


def task_for(graph, cfg):
    """The task of ``cfg.task.task`` on ``graph`` (:func:`task_name`), built on this rank."""
    name = task_name(graph.meta, cfg.task.task)
    if name == "node" and cfg.task.decoder != "auto":
        raise UserError(f"--decoder {cfg.task.decoder} is for link prediction (--task link); this run is a node task")
    if name == "node" and cfg.task.use_valedges_as_input:
        raise UserError("--use-valedges-as-input is for link prediction (--task link); this run is a node task")
    if name not in TASKS:
        raise UserError(f"unknown --task {name!r}; known: auto, {', '.join(TASKS)}")
    return TASKS[name](graph, cfg)


__all__ = ["TASKS", "LinkTask", "NodeTask", "Task", "task_for", "task_name"]
