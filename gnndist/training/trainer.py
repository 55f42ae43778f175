"""Full-graph training on P ranks that equals training on one, of any task (:mod:`gnndist.tasks`).

Weights are replicated; the task's loss is each rank's share of a global mean (its terms over the
*global* count); gradients are all-reduced by sum; metrics are exact over every rank
(:mod:`gnndist.tasks.metrics`). Checkpoints live in :mod:`gnndist.training.checkpoint`, the per-epoch
log and the summary in :mod:`gnndist.training.summary`, several runs in :mod:`gnndist.training.runs`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

from gnndist.config import ModelConfig, TrainConfig
from gnndist.cost import model_widths
from gnndist.dist.grid import ProcessGrid
from gnndist.errors import UserError
from gnndist.graph import DistGraph
from gnndist.kernels.csr import rows2d
from gnndist.nn.models import ModelSpec, model_spec
from gnndist.nn.node_embedding import sharded_parameters
from gnndist.tasks import task_for
from gnndist.training.adam import Adam
from gnndist.training.checkpoint import Checkpoints
from gnndist.training.precision import Precision, check_model
from gnndist.training.summary import (
    SPLITS,
    Best,
    EpochLog,
    RunSummary,
    global_bytes_per_tag,
    metric_key,
    modelled_step,
    rank_report,
    strategy_report,
)

ModelFactory = Callable[[int, int], nn.Module]  # (in_channels, out_channels) -> a model taking (graph, x)


class Trainer:
    """Builds (or takes) the model on every rank and runs the training loop.

    Args:
        graph: this rank's :class:`DistGraph`.
        cfg: the training config tree.
        model: the model to train: a module taking ``(graph, x)``, or a factory
            ``(in_channels, out_channels) -> module`` called after seeding with ``--seed``
            (default: ``--model`` built from ``cfg.model``). Its parameters are broadcast from rank 0.
        resume_if_any: resume from the newest good checkpoint in ``--checkpoint`` when there is
            one (an elastic restart); ``--resume`` requires one.
    """

    def __init__(self, graph: DistGraph, cfg: TrainConfig, model: nn.Module | ModelFactory | None = None,
                 resume_if_any: bool = False):
        self.task = task_for(graph, cfg)  # what is learned: its data, head, loss and metrics
        cfg = self.task.resolved(cfg)  # --task and --decoder as resolved: what a checkpoint rebuilds
        self.graph, self.cfg, self.grid = graph, cfg, graph.grid
        torch.manual_seed(cfg.run.seed)
        self.widths = self.task.widths(cfg.model.hidden)  # the encoder's input and output widths
        self.precision = Precision(cfg.optim.precision, self.grid.device, cfg.optim.loss_scale)
        # --model's spec; a model handed in declares nothing: every layout, one parameter group, not modelled
        self.spec = model_spec(cfg.model.model) if model is None else None
        encoder = self._model(model, *self.widths).to(self.grid.device)
        self.model = self.task.wrap(encoder, cfg, cfg.run.seed).to(self.grid.device)
        check_model(self.model, cfg.optim.precision)
        self.modelled, self.model_network = None, None  # the cost model's step and constants (first epoch)
        own = sharded_parameters(self.model)  # this rank's rows (embeddings): neither broadcast nor all-reduced
        for p in self.model.parameters():  # identical on every rank already; broadcast guards against drift
            if id(p) not in own:
                self.grid.broadcast_(p.data)
        self.params = [p for p in self.model.parameters() if p.requires_grad and id(p) not in own]
        self.sharded = [p for p in self.model.parameters() if p.requires_grad and id(p) in own]
        groups = self.spec.optimiser_groups(encoder, cfg.optim.weight_decay) if self.spec else None  # GCNII's own
        if groups and self.model is not encoder:  # the task's own parameters (a decoder): one more group
            mine = {id(p) for p in encoder.parameters()}
            groups.append({"params": [p for p in self.params + self.sharded if id(p) not in mine]})
        self.clipped = clip_groups(self.model, encoder, self.params, self.sharded, cfg.optim.clip_grad_apart)
        # torch.optim.Adam's numbers, without torch.optim.Optimizer: its first call imports torch._dynamo (~150 MiB)
        self.optim = Adam(groups or self.params + self.sharded, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
        self.base_lrs = [g["lr"] for g in self.optim.param_groups]  # before a resume loads a decayed one
        self.metric = self.task.metric
        self.keys = {split: metric_key(split, self.metric) for split in SPLITS}
        self.task_keys = [metric_key(split, m) for m in self.task.metrics for split in SPLITS]
        self.start_epoch, self.best = 0, Best()
        self.history: list[dict] = []
        self.step_bytes: dict = {}  # this rank's bytes per layer in the last training step (measured)
        self.per_layer: dict = {}  # those bytes summed over ranks
        self.predicted: dict = {}  # the bytes the layouts predict for that step, summed over ranks
        run = cfg.run
        self.checkpoints = Checkpoints(run.checkpoint, self.grid, run.checkpoint_every, run.keep_checkpoints,
                                       cfg.optim.epochs) if run.checkpoint else None
        if self.checkpoints and (run.resume or resume_if_any):
            resumed = self.checkpoints.resume(self.model, self.optim, required=run.resume)
            if resumed:
                self.start_epoch, self.best = resumed

    def _model(self, model: nn.Module | ModelFactory | None, f_in: int, f_out: int) -> nn.Module:
        if isinstance(model, nn.Module):
            return model
        if model is not None:
            return model(f_in, f_out)
        self.spec.check_layout(self.cfg.dist.strategy)
        self.spec.check_precision(self.cfg.optim.precision)
        return model_of(self.cfg.model, self.graph, f_in, f_out, self.cfg.run.seed, self.spec)

    # ------------------------------------------------------------------ one epoch

    def allreduce_grads(self, overflow: bool = False) -> bool:
        """Sum gradients over ranks in one flat buffer; returns whether any rank's ``overflow`` was set.

        Under ``--precision fp16`` each rank's overflow flag (its gradients are not finite) travels as one
        more element of the buffer, so every rank learns of any rank's overflow in the same all-reduce.
        """
        flagged = self.precision.scaled
        if not self.grid.distributed:
            return overflow
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flags = [torch.tensor([float(overflow)], device=self.grid.device)] if flagged else []
        flat = torch.cat([gr.reshape(-1) for gr in grads] + flags)
        nbytes = flat.numel() * flat.element_size()
        self.graph.context.counter.add("grad_allreduce", "fwd", nbytes, nbytes)
        self.grid.all_reduce_(flat)
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p)
            offset += n
        return bool(flat[-1] > 0) if flagged else overflow

    def train_step(self, epoch: int) -> float:
        """The epoch's optimisation steps (the task's: one, or one per ``--edge-batch``) in the graph's step
        context; the phase timer splits their time. Returns the mean of the steps' global losses."""
        t = self.graph.context.timer
        self.model.train()
        factor = lr_factor(epoch, self.cfg.optim.lr_decay_every, self.cfg.optim.epochs)
        for group, lr in zip(self.optim.param_groups, self.base_lrs):
            group["lr"] = lr * factor
        losses = []
        for step in range(self.task.steps(epoch)):
            with t.phase("other"):
                self.optim.zero_grad(set_to_none=True)
            with t.phase("dense"):
                with self.precision.autocast():  # fp32: nothing
                    loss = self.task.loss(self.model, epoch, step)  # fp32 (autocast computes losses in fp32)
                self.precision.backward(loss)  # fp16: scaled
            with t.phase("comm"):
                overflow = self.allreduce_grads(self.precision.overflowed(self.params))
                total = self.grid.all_reduce_(loss.detach().clone())
            with t.phase("other"):  # loss and gradients are global here: every rank decides alike
                self.precision.step(self.optim, self.params, overflow, total, epoch,
                                    check=lambda: self._before_step(epoch, total))
                losses.append(float(total))
        return sum(losses) / len(losses)

    def evaluate(self) -> dict[str, float]:
        """The task's metrics on train / val / test over every rank, keyed ``train_<metric>`` etc. (collective)."""
        self.model.eval()
        return self.task.evaluate(self.model, self.precision.autocast)

    def epoch(self, epoch: int) -> dict:
        """Train one step, measure it (time, bytes, phases), evaluate: the epoch's row of the log."""
        g, grid = self.graph, self.grid
        with g.context.step(seed=self.cfg.run.seed, epoch=epoch):
            grid.synchronize()
            t0 = time.perf_counter()
            loss = self.train_step(epoch)
            grid.synchronize()
            dt = time.perf_counter() - t0
            parts = g.context.timer.breakdown()  # this rank's aggregation / dense / comm / other seconds
            self.step_bytes = g.context.counter.per_tag()  # this rank's, before evaluate() adds its forward
            if epoch == self.start_epoch:
                g.strategy.after_first_step()  # auto: every layer has chosen; free the other layouts
                self.modelled, self.model_network = modelled_step(g, self.spec.cost if self.spec else None,
                                                                  self.cost_widths(), self.cfg.dist.network)
            self.per_layer = global_bytes_per_tag(self.step_bytes, grid)
            self.predicted = global_bytes_per_tag(g.predicted_bytes(), grid)
        comm_bytes = sum(v["fwd_sent"] + v["bwd_sent"] for v in self.per_layer.values())
        model_s = self.modelled.total if self.modelled else None
        return {"epoch": epoch, "loss": loss, **self.evaluate(), "time_s": dt, "model_time_s": model_s,
                "comm_bytes": comm_bytes, **parts}

    def cost_widths(self) -> tuple[int, ...]:
        """The widths of ``--model``'s layers, ``(F, hidden, ..., hidden, out)``, as the cost model describes them."""
        m = self.cfg.model
        return model_widths(self.widths[0], self.widths[1], m.hidden, m.layers)

    def select(self, row: dict) -> None:
        """Model selection on the run's validation metric: the first maximum."""
        val = row[self.keys["val"]]
        if val > self.best.val:
            others = {k: row[k] for k in self.task_keys if k not in self.keys.values()}  # e.g. a link task's AP
            self.best = Best(val, row["epoch"], row[self.keys["train"]], row[self.keys["test"]], others)

    # ------------------------------------------------------------------ loop
    def fit(self) -> RunSummary:
        """Train for ``cfg.optim.epochs`` epochs (or until ``--patience``); returns the run's summary."""
        cfg, g = self.cfg, self.graph
        g.context.timer.sync = self.grid.synchronize if cfg.run.profile and self.grid.device.type == "cuda" else None
        with EpochLog(cfg.run.log_file, cfg.run.progress, cfg.optim.epochs, self.start_epoch, self.grid) as log:
            for epoch in range(self.start_epoch, cfg.optim.epochs):
                row = self.epoch(epoch)
                self.select(row)
                log.write(row, row[self.keys["val"]])
                if self.checkpoints:
                    self.checkpoints.save(epoch, self.model, self.optim, self.best, cfg.to_dict(), self.widths,
                                          edge_dim=edge_width(g), hetero=g.hetero)
                if cfg.eval.patience and epoch - self.best.epoch >= cfg.eval.patience:
                    break  # the same decision on every rank: the metric is global
        self.history = log.history
        return self.summary(log.history)

    def summary(self, history: list[dict]) -> RunSummary:
        """The run's summary from its per-epoch rows (collective: per-rank measures are gathered)."""
        cfg, g = self.cfg, self.graph
        steady = [r["time_s"] for r in history[1:] or history]
        per_rank, synced = rank_report(g, history, self.step_bytes)
        return RunSummary(
            metric=self.metric, best=self.best, epochs=cfg.optim.epochs,
            epochs_run=history[-1]["epoch"] + 1 if history else self.start_epoch,
            final_loss=history[-1]["loss"] if history else None,
            epoch_time_s=sum(steady) / max(len(steady), 1),
            comm_bytes_per_epoch=int(sum(r["comm_bytes"] for r in history) / max(len(history), 1)),
            comm_bytes_per_layer=self.per_layer, predicted_bytes_per_layer=self.predicted,
            strategies=strategy_report(g), per_rank=per_rank, breakdown_synchronised=synced,
            nproc=self.grid.world_size, strategy=cfg.dist.strategy, model=cfg.model.model,
            dataset=g.meta.get("dataset"), model_epoch_time_s=self.modelled.total if self.modelled else None,
            model_network=self.model_network.name if self.model_network else None,
            model_constants=self.model_network.as_dict() if self.model_network else None,
            precision=cfg.optim.precision, loss_scale=self._loss_scale_report(), history=history)

    def _loss_scale_report(self) -> dict | None:
        """fp16's loss scale at the end of the run and the steps it skipped (the same on every rank); else None."""
        return self.precision.report()

    # ------------------------------------------------------------------ numerical guard
    def _before_step(self, epoch: int, loss: Tensor) -> None:
        """On the global gradients, before the optimiser's step: the finiteness guard, then ``--clip-grad``."""
        self._check_finite(epoch, loss)
        if self.cfg.optim.clip_grad > 0:
            for replicated, sharded in self.clipped:
                clip_global_norm(replicated, sharded, self.cfg.optim.clip_grad, self.grid)

    def _check_finite(self, epoch: int, loss: Tensor) -> None:
        """Stop (one line) when the global loss or a gradient is NaN/Inf, before the optimiser step spoils the
        weights."""
        grads = [(n, p.grad) for n, p in self.model.named_parameters() if p.grad is not None]
        finite = bool(torch.isfinite(loss)) and bool(torch.stack([g.isfinite().all() for _, g in grads]).all()
                                                        if grads else True)
        if self.sharded:  # this rank's own rows' gradients differ per rank: every rank decides on all of them
            finite = bool(self.grid.all_reduce_(torch.tensor([0.0 if finite else 1.0], device=self.grid.device)) == 0)
        if finite:
            return
        what = f"the loss is {float(loss)}"
        if bool(torch.isfinite(loss)):
            name = next(n for n, g in grads if not bool(g.isfinite().all()))
            what = f"the gradient of {name} is not finite"
        kept = self.checkpoints.found() if self.checkpoints else []
        where = f"; the last good checkpoint is {kept[-1]}" if kept else ""
        raise UserError(f"epoch {epoch}: {what}; training stopped before the optimiser step{where} "
                        f"(lower --lr, or check the features)")


def edge_width(graph: DistGraph) -> int:
    """The width of the partition's edge features (0: it has none)."""
    ea = graph.edge_attr
    return rows2d(ea).shape[1] if ea is not None else 0


def model_of(m: ModelConfig, graph: DistGraph, f_in: int, f_out: int, seed: int = 0,
             spec: ModelSpec | None = None) -> nn.Module:
    """The registered model ``--model`` of the config ``m`` (``spec``: its spec, looked up by default) of widths
    ``f_in`` to ``f_out`` (the task's: :meth:`~gnndist.tasks.node.NodeTask.widths`) on this graph (``seed``: of a
    typed graph's embeddings)."""
    spec = spec or model_spec(m.model)
    return spec.build(f_in, m.hidden, f_out, m.layers, m.dropout, m.norm, m.recompute,
                      m.arch, edge_dim=edge_width(graph), graph=graph, num_bases=m.num_bases, seed=seed,
                      embedding=m.embedding, bias=m.bias)


def clip_groups(model: nn.Module, encoder: nn.Module, replicated: list[nn.Parameter], sharded: list[nn.Parameter],
                apart: bool) -> list[tuple[list[nn.Parameter], list[nn.Parameter]]]:
    """The parameter groups ``--clip-grad`` clips, each to its own global norm: ``(replicated, sharded)`` of the whole
    model; with ``apart`` (``--clip-grad-apart``, Refined-GAE's three ``clip_grad_norm_`` calls), the encoder's, the
    task's own (the decoder's), and the learned rows' where there are any: one line when the model has no
    parameters beside the encoder's (a node task)."""
    if not apart:
        return [(replicated, sharded)]
    if model is encoder:
        raise UserError("--clip-grad-apart clips a link model's encoder and decoder apart: it is for --task link")
    mine = {id(p) for p in encoder.parameters()}
    groups = [([p for p in replicated if id(p) in mine], []), ([p for p in replicated if id(p) not in mine], [])]
    return groups + ([([], sharded)] if sharded else [])


def lr_factor(epoch: int, every: int, epochs: int) -> float:
    """The learning rate of ``epoch`` over ``--lr`` under ``--lr-decay-every``: ``max(1 - e / epochs, 1e-4)`` with
    ``e`` the last multiple of ``every`` at or before ``epoch`` (Refined-GAE's ``adjustlr``, called every
    ``--interval`` epochs from epoch 0); 1 when ``every`` is 0."""
    if every <= 0:
        return 1.0
    return max(1.0 - (epoch - epoch % every) / epochs, 1e-4)


def clip_global_norm(replicated: list[nn.Parameter], sharded: list[nn.Parameter], max_norm: float,
                     grid: ProcessGrid) -> float:
    """Scale every gradient by ``min(1, max_norm / (norm + 1e-6))``, ``norm`` the 2-norm of all of the model's
    gradients (``torch.nn.utils.clip_grad_norm_``'s rule) as one process has them; returns ``norm``.

    The replicated parameters' gradients are already summed over ranks (the same on every rank): each rank adds
    their squares alike. A sharded parameter's rows (learned embeddings) are this rank's own: their squares are
    all-reduced. The squares are summed in float64, so the coefficient does not depend on P (collective when any
    parameter is sharded on a distributed grid).
    """
    def squares(params: list[nn.Parameter]) -> Tensor:
        grads = [p.grad.double().pow(2).sum() for p in params if p.grad is not None]
        return torch.stack(grads).sum() if grads else torch.zeros((), dtype=torch.float64, device=grid.device)

    total = squares(replicated)
    if sharded and grid.distributed:
        total = total + grid.all_reduce_(squares(sharded).reshape(1))[0]
    elif sharded:
        total = total + squares(sharded)
    norm = float(total.sqrt())
    coef = min(1.0, max_norm / (norm + 1e-6))
    for p in replicated + sharded:
        if p.grad is not None:
            p.grad.mul_(coef)
    return norm

