"""``gnndist predict``: a trained model applied to the whole graph on every rank, written in the dataset's node order.

    gnndist predict PARTDIR --checkpoint CKDIR --out pred.npy                 # class probabilities [N, C]
    gnndist predict PARTDIR --checkpoint CKDIR --out emb.npy --what embedding --layer 0

Each rank runs the model in eval mode on its part (the weights are replicated, so any number
of parts serves, and another graph with the same feature width too) and writes its owned rows
at their dataset positions into one memory-mapped ``.npy`` (no rank gathers everything); ``.pt``
and ``.csv`` are gathered on rank 0 (small outputs). The file is written under a temporary
name and renamed when every rank is done. The metric is then recomputed from the written rows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from gnndist.errors import UserError

LAYOUTS = ("1d", "2d")  # --strategy of predict: the layouts that take no option but the rank count
SUFFIXES = (".npy", ".pt", ".csv")


@dataclass(frozen=True)
class PredictRequest:
    """What ``gnndist predict`` writes: ``what`` of the model in ``checkpoint`` for every node, into ``out``."""

    checkpoint: str
    out: str
    what: str = "probs"
    layer: int | None = None
    force: bool = False
    strategy: str = "1d"
    progress: bool = True  # rank 0: a bar naming the stage on a terminal, else one line per slow stage
    type: str | None = None  # a typed graph: the node type whose rows are written (default: the target type)
    pairs: str | None = None  # --what scores: a .npy of [n, 2] dataset node ids
    use_valedges_as_input: bool = False  # a link model: its encoder over training + validation edges (OGB collab's)

    def check(self) -> None:
        """One line for a request that cannot be (before any rank starts)."""
        if self.what not in whats():
            raise UserError(f"--what must be one of {', '.join(whats())}, got {self.what!r}")
        if (self.pairs is not None) != (self.what == "scores"):
            raise UserError("--pairs PAIRS.npy goes with --what scores (a link model's probability of each pair)")
        if self.pairs is not None:
            from gnndist.tasks.link import read_pairs

            read_pairs(self.pairs, 0, 1)  # one line: missing, not [n, 2] integers
        if self.layer is not None and self.what != "embedding":
            raise UserError("--layer K goes with --what embedding (the representation after layer K)")
        if Path(self.out).suffix not in SUFFIXES:
            raise UserError(f"--out {self.out}: the file's suffix says the format, one of {', '.join(SUFFIXES)}")
        out = Path(self.out)
        if out.is_dir():
            raise UserError(f"--out {out} is a folder: give the file to write (e.g. {out / ('pred' + out.suffix)})")
        if out.exists() and not self.force:
            raise UserError(f"--out {out} exists: pass --force to replace it")
        folder = out.parent if str(out.parent) else Path(".")
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise UserError(f"--out {out}: {folder} is not a writable folder")


def whats() -> tuple[str, ...]:
    """Every ``--what`` some registered task writes (:attr:`~gnndist.tasks.base.Task.outputs`), in registration
    order."""
    import gnndist.tasks  # noqa: F401  (the built-in tasks register on import)
    from gnndist.tasks.base import TASKS

    return tuple(dict.fromkeys(w for task in TASKS.values() for w in task.outputs))


def __getattr__(name: str):
    """``WHATS``: :func:`whats`, read when asked for (the tasks register on import)."""
    if name == "WHATS":
        return whats()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_layer(layers: list[nn.Module], layer: int) -> None:
    """One line when the model, of representation layers ``layers``, has no layer ``layer``."""
    if not 0 <= layer < len(layers):
        raise UserError(f"--layer {layer} is out of range: the model has {len(layers)} layers (0..{len(layers) - 1})")


def forward_at(model: nn.Module, graph, layer: int | None = None, layers: list[nn.Module] | None = None,
               stages=None) -> Tensor:
    """The model's output on ``graph`` in eval mode, or (``layer`` K) the output of its layer K: ``[n_owned, *]``.

    ``layers``: the model's representation layers, as its spec declares them
    (:meth:`gnndist.nn.ModelSpec.layers`), needed for ``layer``; ``stages`` (a
    :class:`partition.progress.Stages`): each of them is a stage, named as it starts.
    """
    model.eval()
    if layer is not None:
        check_layer(layers or [], layer)
    seen: list[Tensor] = []

    def keep(module, inputs, output) -> None:
        seen.append(output[0] if isinstance(output, tuple) else output)  # RevGNN's blocks return (state, x, bound)

    hooks = [layers[layer].register_forward_hook(keep)] if layer is not None else []
    if stages is not None:
        shown = layers or []
        for k, m in enumerate(shown):
            hooks.append(m.register_forward_pre_hook(lambda *_, k=k: stages.set_postfix_str(
                f"layer {k + 1}/{len(shown)}")))
    try:
        with torch.no_grad():
            out = model(graph, graph.x)
    finally:
        for h in hooks:
            h.remove()
    if layer is None:
        return out
    out = seen[-1]
    return out.float() if out.dtype == torch.int64 else out  # a reversible block's fixed-point state


def predict_rank(grid, partdir: str, req: PredictRequest) -> dict:
    """Body of one rank of ``gnndist predict``; rank 0 returns the summary (the metric recomputed from the file).

    Rank 0 shows the stages (``req.progress``): reading the checkpoint and the part, each layer of the
    forward, writing, the metric; a bar on a terminal, else one line per stage that took a while. What is
    written, and which ``--what`` a checkpoint has, its task says (:attr:`~gnndist.tasks.base.Task.outputs`).
    """
    from gnndist.dist.timing import peak_memory_bytes
    from gnndist.partition.progress import Stages

    stages = Stages(None, f"gnndist predict on {grid.world_size} rank(s)", enabled=req.progress and grid.is_main,
                    unit="stage", bar_format="{desc}{postfix} ({elapsed})")
    try:
        run = _prepare(grid, partdir, req, stages)
        stages.set_postfix_str("forward")  # its layers' own stages follow, where the model names its layers
        out = forward_at(run.model.to(grid.device), run.encoded, req.layer, run.layers,
                         stages if grid.is_main else None)
        if req.pairs is not None:  # each rank scores its slice of the pairs, written at their positions
            stages.set_postfix_str("score the pairs")
        rows, keep, ids, n = placed(run.task.predicted(run.model, out, req.what, req.pairs), run.graph, req.type)
        stages.set_postfix_str(f"write {Path(req.out).name}")
        written = rows.clone()
        written[keep] = write_rows(grid, run.graph, rows[keep], req.out, ids, n)
        summary = {"out": req.out, "what": req.what, "layer": req.layer, "shape": [n, rows.shape[1]],
                   "checkpoint": str(run.path), "dataset": run.graph.meta.get("dataset"), "nproc": grid.world_size}
        if req.what in run.task.scored:  # the metric from what was written: equals the run's for the same weights
            stages.set_postfix_str("the metric from the written rows")
            summary.update(run.task.written_metrics(written.to(grid.device)))
    except BaseException:
        stages.discard()  # the error is the one line
        raise
    stages.close()
    summary["peak_memory_bytes"] = grid.all_gather_object(peak_memory_bytes(grid.device))  # per rank, measured
    return summary


@dataclass
class _Prepared:
    """What a rank of ``gnndist predict`` runs: its graph, the checkpoint's task and model, the graph the model
    runs on and the model's representation layers."""

    graph: object
    task: object
    model: nn.Module
    path: Path
    encoded: object
    layers: list


def _prepare(grid, partdir: str, req: PredictRequest, stages) -> _Prepared:
    """Read the checkpoint and this rank's part, build the task and the model (collective; a failure on any rank is
    one line on every rank), and check ``req`` against the task's outputs."""
    from gnndist.config import DistConfig, TrainConfig, with_fields
    from gnndist.dist.grid import together
    from gnndist.graph import DistGraph
    from gnndist.nn.models import model_spec
    from gnndist.tasks import task_for
    from gnndist.training.checkpoint import load_model_file

    stages.set_postfix_str("read the checkpoint")
    state, config, path = together(grid, lambda: load_model_file(req.checkpoint, grid.device),
                                   "another rank could not read the checkpoint")
    # the task over the partition's (training) message graph; --use-valedges-as-input: the task's predict_graph
    cfg = with_fields(TrainConfig.from_dict(config), task={"use_valedges_as_input": False})
    stages.set_postfix_str("read the part")
    arrays, meta = together(grid, lambda: DistGraph.read(partdir, grid), "another rank could not load its part")
    dist = DistConfig(strategy=req.strategy)
    graph = DistGraph.from_config(arrays, meta, grid, cfg, dist=dist, comm_dtype="fp32",
                                  root=partdir)  # the forward in fp32: rows travel as they are
    task = task_for(graph, cfg)
    task.check_output(req.what, req.layer, req.use_valedges_as_input)
    encoded = task.predict_graph(graph, dist, req.use_valedges_as_input)
    model = together(grid, lambda: _model(cfg, graph, task, state, path), "another rank's model does not match")
    layers = model_spec(cfg.model.model).layers(task.encoder(model), cfg.model.arch)  # its representation layers
    if req.layer is not None:
        check_layer(layers, req.layer)  # every rank alike: one line, before any work
    stages.say(f"gnndist: applying {cfg.model.model} ({path}) to {graph.num_nodes:,} nodes on "
               f"{grid.world_size} rank(s)")
    return _Prepared(graph, task, model, path, encoded, layers)


def placed(rows, graph, name: str | None) -> tuple[Tensor, Tensor, np.ndarray, int]:
    """The rows a rank writes, which of them, their positions in the output and its row count: a task's
    :class:`~gnndist.tasks.base.Placed` rows as they are; one row per owned node at its node's position
    (:func:`rows_of_type`)."""
    from gnndist.tasks.base import Placed

    if isinstance(rows, Placed):
        return rows.rows, torch.ones(rows.rows.shape[0], dtype=torch.bool), rows.ids, rows.count
    return (rows.cpu(), *rows_of_type(graph, name))  # [n_owned, C]


def rows_of_type(graph, name: str | None) -> tuple[Tensor, np.ndarray, int]:
    """The owned rows written (a mask ``[n_owned]``), their positions in the output and its row count.

    A homogeneous graph: every row, at its dataset id. A typed graph: the rows of type ``name`` (default the
    target type), at their index within the type (type ``t``'s dataset ids are ``offsets[t] : offsets[t + 1]``).
    """
    ids = graph.orig_id[: graph.n_owned].cpu().numpy()
    if graph.hetero is None:
        if name is not None:
            raise UserError(f"--type {name!r}: the partition is of a homogeneous graph (one node type)")
        return torch.ones(graph.n_owned, dtype=torch.bool), ids, graph.num_nodes
    types, offsets = graph.hetero.node_types, graph.hetero.offsets
    name = name or graph.hetero.target
    if name not in types:
        raise UserError(f"--type {name!r} is not a node type of this graph (types: {', '.join(types)})")
    t = types.index(name)
    keep = (graph.node_type[: graph.n_owned] == t).cpu()
    return keep, ids[keep.numpy()] - offsets[t], offsets[t + 1] - offsets[t]


def _model(cfg, graph, task, state: dict, path: Path) -> nn.Module:
    from gnndist.nn.node_embedding import own_state
    from gnndist.training.checkpoint import check_same_model
    from gnndist.training.trainer import model_of

    widths = task.widths(cfg.model.hidden)
    model = task.wrap(model_of(cfg.model, graph, *widths, cfg.run.seed), cfg, cfg.run.seed)
    state, _ = own_state(model, state)  # the embeddings' whole tables: this rank's rows
    check_same_model(path, {"model": state, "config": cfg.to_dict()}, model)  # one line: another model or width
    model.load_state_dict(state)
    return model


def write_rows(grid, graph, rows: Tensor, out: str, ids: np.ndarray | None = None, n: int | None = None) -> Tensor:
    """Write every rank's owned ``rows`` at their dataset positions into ``out``; returns this rank's rows as written.

    ``ids`` and ``n``: the rows' positions and the output's row count (default: the owned rows' dataset ids, N).

    ``.npy``: rank 0 creates a memory-mapped ``[N, C]`` file under a temporary name, each rank writes its
    rows there, rank 0 renames it once all have (collective). ``.pt`` / ``.csv``: gathered on rank 0.
    """
    from gnndist.dist.grid import together

    target = Path(out)
    tmp = target.with_name(f".{target.name}.tmp")
    ids = graph.orig_id[: graph.n_owned].cpu().numpy() if ids is None else ids
    n, width = graph.num_nodes if n is None else n, rows.shape[1]
    dtype = np.int64 if rows.dtype == torch.int64 else np.float32
    try:
        if target.suffix == ".npy":
            together(grid, (lambda: _create(tmp, (n, width), dtype)) if grid.is_main else None,
                     "rank 0 could not create the output")
            written = together(grid, lambda: _write_mine(tmp, ids, rows.numpy().astype(dtype)),
                               "another rank could not write its rows")  # every rank's rows are in the file now
            together(grid, (lambda: _rename(tmp, target)) if grid.is_main else None, "rank 0 could not rename it")
            return written
        every = grid.all_gather_object((ids, rows.numpy()))
        full = None
        if grid.is_main:
            full = np.zeros((n, width), dtype=dtype)
            for i, r in every:
                full[i] = r
        together(grid, (lambda: _save_small(full, tmp, target)) if grid.is_main else None,
                 "rank 0 could not write the output")
        return rows
    finally:
        if grid.is_main:
            tmp.unlink(missing_ok=True)  # a failed write leaves nothing behind (a finished one was renamed)


def _write_mine(tmp: Path, ids: np.ndarray, rows: np.ndarray) -> Tensor:
    """This rank's rows into the shared memory-mapped file; what it reads back there (the written values)."""
    try:
        mm = np.lib.format.open_memmap(tmp, mode="r+")
        mm[ids] = rows
        mm.flush()
        return torch.from_numpy(np.array(mm[ids]))
    except OSError as e:
        raise UserError(f"cannot write {tmp.with_name(tmp.name[1:-4])}: {e.strerror or e}") from None


def _rename(tmp: Path, target: Path) -> None:
    try:
        os.replace(tmp, target)
    except OSError as e:
        raise UserError(f"cannot write {target}: {e.strerror or e}") from None


def _create(tmp: Path, shape: tuple[int, int], dtype) -> None:
    try:
        np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape).flush()
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write {tmp.with_name(tmp.name[1:-4])}: {e.strerror or e}") from None


def _save_small(full: np.ndarray, tmp: Path, target: Path) -> None:
    try:
        if target.suffix == ".pt":
            torch.save(torch.from_numpy(full), tmp)
        else:  # node,<value 0>,<value 1>,...: row i is dataset node i
            fmt = "%d" if full.dtype == np.int64 else "%.8g"
            header = "node," + ",".join(f"v{j}" for j in range(full.shape[1]))
            np.savetxt(tmp, np.column_stack([np.arange(len(full)), full]), delimiter=",",
                       fmt=["%d"] + [fmt] * full.shape[1], header=header, comments="")
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write {target}: {e.strerror or e}") from None
