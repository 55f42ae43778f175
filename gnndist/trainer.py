"""Full-graph training on P ranks that equals training on one.

Weights are replicated; the loss is the sum over a rank's training nodes divided by the
*global* training count; gradients are all-reduced by sum; metrics are exact over every
rank (:mod:`gnndist.metrics`). :func:`fit_runs` repeats training over seeds and splits in
one process group, on one partition.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from gnndist import metrics
from gnndist.config import TrainConfig
from gnndist.errors import PeerFailed, UserError
from gnndist.graph import DistGraph
from gnndist.kernels.csr import rows2d
from gnndist.nn import build_model
from gnndist.timing import PARTS, peak_memory_bytes

log = logging.getLogger("gnndist")
CHECKPOINT_FORMAT = 2  # 2: "best" holds the run's metric as val/train/test (1: *_acc keys)


class Trainer:
    """Builds the model on every rank and runs the training loop.

    Args:
        graph: this rank's :class:`DistGraph`.
        cfg: the training config tree.
        resume_if_any: resume from the newest good checkpoint in ``--checkpoint`` when there is
            one (an elastic restart); ``--resume`` requires one.
    """

    def __init__(self, graph: DistGraph, cfg: TrainConfig, resume_if_any: bool = False):
        self.graph, self.cfg, self.grid = graph, cfg, graph.grid
        if graph.num_train == 0:
            raise UserError("the partition has no training nodes (train_mask is empty)")
        graph.seed = cfg.run.seed
        if cfg.model.normalize_features and not getattr(graph, "features_normalized", False):  # once per graph
            negative = self.grid.all_reduce_((graph.x < 0).any().double().view(1))  # [1] on grid.device
            if negative.item() == 0:  # row sums of signed features are no scale: leave those alone
                graph.x = graph.x / graph.x.sum(dim=1, keepdim=True).clamp(min=1e-12)  # per node: exact for any P
            graph.features_normalized = True
        torch.manual_seed(cfg.run.seed)
        m = cfg.model
        self.multilabel = graph.y.dim() > 1
        self.binary = not self.multilabel and graph.num_classes == 2  # one logit, binary cross-entropy
        out = graph.y.shape[1] if self.multilabel else 1 if self.binary else graph.num_classes
        ea = getattr(graph, "edge_attr", None)
        edge_dim = rows2d(ea).shape[1] if ea is not None else 0
        self.model = build_model(m.model, graph.x.shape[1], m.hidden, out, m.layers, m.dropout, m.norm, m.recompute,
                                 edge_dim=edge_dim)
        self.model.to(self.grid.device)
        for p in self.model.parameters():  # identical on every rank already; broadcast guards against drift
            self.grid.broadcast_(p.data)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        groups = getattr(self.model, "param_groups", None)  # a model's own weight decay per group (GCNII)
        self.optim = torch.optim.Adam(groups(cfg.optim.weight_decay) if groups else self.params, lr=cfg.optim.lr,
                                      weight_decay=cfg.optim.weight_decay)
        self.start_epoch = 0
        self.metric = metric_of(cfg, graph)
        self.keys = {split: f"{split}_{self.metric.replace('-', '_')}" for split in ("train", "val", "test")}
        self.best = {"val": -1.0, "epoch": -1, "train": 0.0, "test": 0.0}
        if cfg.run.checkpoint:
            self._agree(self._prepare_checkpoint_dir, "could not be created")
        if cfg.run.resume or (resume_if_any and cfg.run.checkpoint):
            self._resume(required=cfg.run.resume)

    # ------------------------------------------------------------------ one epoch
    def loss(self, logits: Tensor) -> Tensor:
        """This rank's share of the global mean loss over training nodes."""
        g = self.graph
        mask = g.train_mask
        if self.multilabel:
            per = F.binary_cross_entropy_with_logits(logits[mask], g.y[mask].float(), reduction="sum")
            return per / (g.num_train * g.y.shape[1])
        if self.binary:  # logits [n_owned, 1]
            per = F.binary_cross_entropy_with_logits(logits[mask, 0], g.y[mask].float(), reduction="sum")
            return per / g.num_train
        return F.cross_entropy(logits[mask], g.y[mask].long(), reduction="sum") / g.num_train

    def allreduce_grads(self) -> None:
        """Sum gradients over ranks in one flat buffer."""
        if not self.grid.distributed:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([gr.reshape(-1) for gr in grads])
        self.graph.counter.add("grad_allreduce", "fwd", flat.numel() * flat.element_size(), flat.numel() * flat.element_size())
        self.grid.all_reduce_(flat)
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p)
            offset += n

    def train_step(self, epoch: int) -> float:
        """One step; ``graph.timer`` splits its time (the SpMMs and exchange waits inside are timed by the graph)."""
        t = self.graph.timer
        self.model.train()
        self.graph.epoch = epoch
        with t.phase("other"):
            self.optim.zero_grad(set_to_none=True)
        with t.phase("dense"):
            loss = self.loss(self.model(self.graph, self.graph.x))
            loss.backward()
        with t.phase("comm"):
            self.allreduce_grads()
            total = self.grid.all_reduce_(loss.detach().clone())
        with t.phase("other"):
            self._check_finite(epoch, total)  # loss and gradients are global here: every rank decides alike
            self.optim.step()
            return float(total)

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """The run's metric on train/val/test over every rank, keyed ``train_<metric>`` etc.

        Count metrics add up statistics over ranks (one all-reduce); ROC-AUC gathers every
        rank's labels and scores of the split and ranks them all (rank order does not matter).
        """
        self.model.eval()
        g = self.graph
        logits = self.model(g, g.x)  # [n_owned, C]
        masks = (g.train_mask, g.val_mask, g.test_mask)
        if self.metric == "rocauc":
            score = metrics.scores(logits, self.multilabel)
            parts = self.grid.all_gather_object([(g.y[m].cpu(), score[m].cpu()) for m in masks])
            values = [metrics.roc_auc(torch.cat([p[i][0] for p in parts]), torch.cat([p[i][1] for p in parts]))
                      for i in range(3)]
        else:
            stats = [metrics.counts(self.metric, logits[m], g.y[m], g.num_classes) for m in masks]
            flat = torch.cat([s.reshape(-1) for s in stats])  # one all-reduce for the three splits
            self.grid.all_reduce_(flat)
            values = [metrics.from_counts(self.metric, part.view_as(s))
                      for part, s in zip(flat.split([s.numel() for s in stats]), stats)]
        return dict(zip(self.keys.values(), values))

    def global_bytes_per_tag(self, local: dict[str, dict[str, int]] | None = None) -> dict[str, dict[str, int]]:
        """Bytes of this epoch's training step summed over ranks, per tag (layer) and direction.

        ``local`` defaults to this rank's measured bytes (the counter); pass the predicted ones to sum those.
        """
        local = self.graph.counter.per_tag() if local is None else local
        tags = sorted(local)
        keys = ("fwd_sent", "fwd_received", "bwd_sent", "bwd_received")
        vec = torch.tensor([float(local[t].get(k, 0)) for t in tags for k in keys], dtype=torch.float64,
                           device=self.grid.device)
        self.grid.all_reduce_(vec)  # every rank runs the same model, so the tags agree
        vals = vec.view(len(tags), len(keys)).long().tolist() if tags else []
        return {t: dict(zip(keys, row)) for t, row in zip(tags, vals)}

    def strategy_report(self) -> dict[str, dict]:
        """Per layer (tag): the strategy that aggregated it, its replication and width, whether its SpMM had a
        backward in the last epoch (and ``auto``'s candidates)."""
        g = self.graph
        auto = getattr(g.strategy, "report", {})
        out = {}
        for tag, (width, n) in sorted(g.calls.items()):
            s = g.strategy_of(tag)
            out[tag] = {"strategy": s.name, "replication": getattr(s, "replication", None), "width": width,
                        "backward": n > g.forward_only.get(tag, 0)}
            if tag in auto:
                out[tag]["candidates"] = auto[tag]["candidates"]
        return out

    def rank_report(self, history: list[dict]) -> dict:
        """Per rank (gathered): peak memory, SpMM bytes of the last training step, mean time breakdown after the first epoch.

        The breakdown's parts are exclusive seconds of :mod:`gnndist.timing` (``breakdown_synchronised``:
        the device was synchronised at every phase, i.e. CPU, or CUDA under ``--profile``).
        """
        steady = history[1:] or history
        parts = {f"{p}_s": sum(r[f"{p}_s"] for r in steady) / max(len(steady), 1) for p in PARTS} if history else {}
        spmm = [t for t in self.graph.calls]  # the SpMM tags (not the gradient all-reduce)
        c = getattr(self, "step_bytes", {})
        mine = {"rank": self.grid.rank, "peak_memory_bytes": peak_memory_bytes(self.grid.device),
                "spmm_bytes_sent": sum(c.get(t, {}).get("fwd_sent", 0) + c.get(t, {}).get("bwd_sent", 0) for t in spmm),
                "spmm_bytes_received": sum(c.get(t, {}).get("fwd_received", 0) + c.get(t, {}).get("bwd_received", 0)
                                           for t in spmm), **parts}
        sync = self.grid.device.type != "cuda" or self.graph.timer.sync is not None
        return {"per_rank": self.grid.all_gather_object(mine), "breakdown_synchronised": sync}

    # ------------------------------------------------------------------ loop
    def fit(self) -> dict:
        """Train for ``cfg.optim.epochs`` epochs; returns the summary (best-val model selection)."""
        cfg, grid, g = self.cfg, self.grid, self.graph
        g.timer.sync = grid.synchronize if cfg.run.profile and grid.device.type == "cuda" else None
        log = open(cfg.run.log, "a") if cfg.run.log and grid.is_main else None
        bar = None
        if grid.is_main and cfg.run.progress:
            from tqdm import tqdm

            bar = tqdm(total=cfg.optim.epochs, initial=self.start_epoch, desc="train", unit="epoch", leave=False,
                       disable=None)  # on a terminal only
        times, comm, history = [], [], []
        try:
            for epoch in range(self.start_epoch, cfg.optim.epochs):
                g.reset_counters()
                g.timer.reset()
                grid.synchronize()
                t0 = time.perf_counter()
                loss = self.train_step(epoch)
                grid.synchronize()
                dt = time.perf_counter() - t0
                parts = g.timer.breakdown()  # this rank's aggregation / dense / comm / other seconds
                self.step_bytes = g.counter.per_tag()  # this rank's, before evaluate() adds its forward
                if epoch == self.start_epoch and hasattr(g.strategy, "settle"):
                    g.strategy.settle()  # auto: every layer has chosen; free the other layouts
                per_layer = self.global_bytes_per_tag()
                predicted = self.global_bytes_per_tag(g.predicted_bytes())
                comm_bytes = sum(v["fwd_sent"] + v.get("bwd_sent", 0) for v in per_layer.values())
                scores = self.evaluate()
                times.append(dt)
                comm.append(comm_bytes)
                row = {"epoch": epoch, "loss": loss, **scores, "time_s": dt, "comm_bytes": comm_bytes, **parts}
                history.append(row)
                val = scores[self.keys["val"]]
                if val > self.best["val"]:  # model selection on the run's metric; the first maximum
                    self.best = {"val": val, "epoch": epoch, "train": scores[self.keys["train"]],
                                 "test": scores[self.keys["test"]]}
                if log:
                    log.write(json.dumps(row) + "\n")
                    log.flush()
                if bar:
                    bar.set_postfix(loss=f"{loss:.4f}", val=f"{val:.3f}")
                    bar.update()
                if cfg.run.checkpoint:
                    self._save(epoch)
                if cfg.eval.patience and epoch - self.best["epoch"] >= cfg.eval.patience:
                    break  # the same decision on every rank: the metric is global
        finally:
            if bar:
                bar.close()
            if log:
                log.close()
        self.history = history
        steady = times[1:] or times
        return {
            **{self.keys[split]: self.best[split] for split in ("train", "val", "test")},
            "best_epoch": self.best["epoch"], "epochs": cfg.optim.epochs,
            "epochs_run": history[-1]["epoch"] + 1 if history else self.start_epoch,
            "final_loss": history[-1]["loss"] if history else None,
            "epoch_time_s": sum(steady) / max(len(steady), 1),
            "comm_bytes_per_epoch": int(sum(comm) / max(len(comm), 1)),
            "comm_bytes_per_layer": per_layer if history else {},
            "predicted_bytes_per_layer": predicted if history else {},
            "strategies": self.strategy_report(),
            **self.rank_report(history),
            "nproc": grid.world_size, "strategy": cfg.dist.strategy, "model": cfg.model.model, "metric": self.metric,
            "dataset": g.meta.get("dataset"),
        }

    # ------------------------------------------------------------------ numerical guard
    def _check_finite(self, epoch: int, loss: Tensor) -> None:
        """Stop (one line) when the global loss or a gradient is NaN/Inf, before the optimiser step spoils the weights."""
        grads = [(n, p.grad) for n, p in self.model.named_parameters() if p.grad is not None]
        finite = bool(torch.isfinite(loss)) and bool(torch.stack([g.isfinite().all() for _, g in grads]).all()
                                                        if grads else True)
        if finite:
            return
        what = f"the loss is {float(loss)}"
        if bool(torch.isfinite(loss)):
            name = next(n for n, g in grads if not bool(g.isfinite().all()))
            what = f"the gradient of {name} is not finite"
        kept = self._checkpoints()
        where = f"; the last good checkpoint is {kept[-1]}" if kept else ""
        raise UserError(f"epoch {epoch}: {what}; training stopped before the optimiser step{where} "
                        f"(lower --lr, or check the features)")

    # ------------------------------------------------------------------ checkpoints
    def _agree(self, action, what: str) -> None:
        """Run ``action`` on rank 0 and fail on every rank together if it raised ``OSError``."""
        error = None
        if self.grid.is_main:
            try:
                action()
            except OSError as e:
                error = e
        failed = self.grid.all_reduce_(torch.tensor([float(error is not None)], device=self.grid.device))
        if error is not None:
            path = error.filename or self.cfg.run.checkpoint
            why = "it is a file, not a directory" if isinstance(error, (FileExistsError, NotADirectoryError)) \
                else error.strerror or error
            raise UserError(f"checkpoint {path} {what}: {why}") from None
        if failed.item() > 0:
            raise PeerFailed(f"rank {self.grid.rank}: rank 0 could not write the checkpoint")

    def _prepare_checkpoint_dir(self) -> None:
        d = Path(self.cfg.run.checkpoint)
        d.mkdir(parents=True, exist_ok=True)
        if not os.access(d, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied", str(d))
        for stale in d.glob(".*.pt.tmp*"):  # left by a run killed mid-write
            stale.unlink(missing_ok=True)

    def _checkpoints(self) -> list[Path]:
        """The checkpoints in ``--checkpoint``, oldest first."""
        d = self.cfg.run.checkpoint
        return sorted(Path(d).glob("ckpt-*.pt")) if d else []

    def _save(self, epoch: int) -> None:
        """Checkpoint every ``--checkpoint-every`` epochs (and the last), and ``best.pt`` when val improves.

        Written to a temporary file, flushed to disk and renamed, so a kill or a full disk
        never leaves a partial file under a checkpoint's name; the newest ``--keep-checkpoints`` stay.
        """
        run = self.cfg.run
        due = (epoch + 1) % run.checkpoint_every == 0 or epoch == self.cfg.optim.epochs - 1
        improved = self.best["epoch"] == epoch
        if not (due or improved):
            return
        d = Path(run.checkpoint)

        def write() -> None:
            if due:
                state = {"format": CHECKPOINT_FORMAT, "model": self.model.state_dict(),
                         "optim": self.optim.state_dict(), "epoch": epoch, "best": dict(self.best),
                         "rng": torch.get_rng_state(), "config": self.cfg.to_dict()}
                _atomic_save({**state, "sha256": _digest(state)}, d / f"ckpt-{epoch:06d}.pt")
                for old in self._checkpoints()[: -run.keep_checkpoints]:
                    old.unlink(missing_ok=True)
            if improved:
                _atomic_save(self.model.state_dict(), d / "best.pt")

        self._agree(write, "could not be written")

    def _resume(self, required: bool) -> None:
        """Load the newest readable checkpoint (skipping corrupt or truncated ones); every rank reads the same file."""
        d = Path(self.cfg.run.checkpoint)
        found = self._checkpoints()
        if not found:
            if required:
                raise UserError(f"--resume: no checkpoint in {d} (ckpt-*.pt); train with --checkpoint {d} first")
            return
        state, skipped = None, []
        for path in reversed(found):
            try:
                state = torch.load(path, map_location=self.grid.device, weights_only=True)
                if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
                    raise ValueError(f"not a gnndist checkpoint of format {CHECKPOINT_FORMAT}")
                if state.pop("sha256", None) != _digest(state):
                    raise ValueError("checksum mismatch")  # a flipped bit loads without complaint otherwise
                break
            except Exception as e:  # truncated, bit-flipped or foreign: try the one before
                state = None
                skipped.append(f"{path} ({(str(e).strip() or type(e).__name__).splitlines()[0].split('. ')[0]})")
        if state is None:
            raise UserError(f"no readable checkpoint in {d}: all {len(found)} are corrupt, e.g. {skipped[0]}")
        for line in skipped if self.grid.is_main else ():
            log.warning(f"skipped the unreadable checkpoint {line}")
        self._check_shapes(path, state)
        self.model.load_state_dict(state["model"])
        self.optim.load_state_dict(state["optim"])
        torch.set_rng_state(state["rng"].cpu())
        self.start_epoch = int(state["epoch"]) + 1
        self.best = dict(state["best"])
        if self.grid.is_main:
            log.info(f"resumed from {path} (epoch {self.start_epoch} of {self.cfg.optim.epochs})")

    def _check_shapes(self, path: Path, state: dict) -> None:
        """One line when the checkpoint holds another model (names or shapes differ)."""
        mine = {k: tuple(v.shape) for k, v in self.model.state_dict().items()}
        theirs = {k: tuple(v.shape) for k, v in state["model"].items()}
        if mine == theirs:
            return
        m = state.get("config", {}).get("model", {})
        wrote = " ".join(f"--{k} {m[k]}" for k in ("model", "layers", "hidden") if k in m)
        diff = next((f"{k} is {list(theirs[k])} there, {list(mine[k])} here" for k in mine
                     if k in theirs and mine[k] != theirs[k]), None)
        diff = diff or f"parameters {sorted(set(mine) ^ set(theirs))[:3]} are in one model only"
        raise UserError(f"{path} holds a different model ({wrote}): {diff}; use the same model flags or another "
                        f"--checkpoint DIR")


def metric_of(cfg: TrainConfig, graph: DistGraph) -> str:
    """The run's metric: ``--metric``, else the dataset's own (:func:`gnndist.metrics.default_metric`)."""
    name = cfg.eval.metric if cfg.eval.metric != "auto" else metrics.default_metric(graph.meta)
    if name == "rocauc" and graph.y.dim() == 1 and graph.num_classes != 2:
        raise UserError(f"--metric rocauc needs a binary or multi-label dataset; {graph.meta.get('dataset')} has "
                        f"{graph.num_classes} classes (use acc, f1-micro or f1-macro)")
    return name


def plan_runs(cfg: TrainConfig, meta: dict) -> list[tuple[int, int | None]]:
    """``(seed, split)`` of every run from ``--runs``, ``--split`` and ``--splits``; ``split`` None: the stored masks.

    Run ``i`` (counting every run) trains with seed ``--seed + i``. ``--splits all`` runs
    ``--runs`` seeds on each shipped split; ``--splits random`` runs run ``r`` on the
    partition's random split ``r`` (seed ``--split-seed + r``).
    """
    e, name = cfg.eval, meta.get("dataset")
    k, kind = int(meta.get("splits") or 0), meta.get("split_kind")
    if e.splits == "all":
        if kind != "shipped":
            raise UserError(f"--splits all: {name} ships no splits (it has one split: the seeded random split of "
                            f"--split-seed, or its official one); use --runs N, or --splits random")
        splits = [s for s in range(k) for _ in range(e.runs)]
    elif e.splits == "random":
        if kind != "random" or k < e.runs:
            have = f"holds {k} random splits" if kind == "random" else "holds no random splits"
            raise UserError(f"--splits random --runs {e.runs}: the partition of {name} {have}; `gnndist run` makes "
                            f"them, or `gnndist partition --random-splits {e.runs}`")
        splits = list(range(e.runs))
    elif e.split is not None:
        if kind != "shipped":
            raise UserError(f"--split {e.split}: {name} ships no splits; its random split is chosen by --split-seed")
        if e.split >= k:
            raise UserError(f"--split {e.split} is out of range: {name} ships {k} splits (0..{k - 1})")
        splits = [e.split] * e.runs
    else:
        splits = [0 if kind == "shipped" else None] * e.runs
    return [(cfg.run.seed + i, s) for i, s in enumerate(splits)]


def fit_runs(graph: DistGraph, cfg: TrainConfig, resume_if_any: bool = False) -> dict:
    """Train every run of :func:`plan_runs` on one graph and one process group; the summary holds each and mean ± std.

    Each run re-initialises the model and the optimiser with its own seed. With several runs,
    ``--checkpoint DIR`` keeps run ``i`` in ``DIR/run-i``.
    """
    plan = plan_runs(cfg, graph.meta)
    runs, summary = [], {}
    for i, (seed, split) in enumerate(plan):
        if split is not None:
            graph.use_split(split)
        run = dataclasses.replace(cfg.run, seed=seed)
        if cfg.run.checkpoint and len(plan) > 1:  # --resume requires run 0's checkpoint; later runs may not have begun
            run = dataclasses.replace(run, checkpoint=str(Path(cfg.run.checkpoint) / f"run-{i}"), resume=run.resume and i == 0)
        trainer = Trainer(graph, dataclasses.replace(cfg, run=run), resume_if_any=resume_if_any or cfg.run.resume)
        summary = trainer.fit()
        keys = trainer.keys
        runs.append({"run": i, "seed": seed, "split": split, **{keys[s]: summary[keys[s]] for s in keys},
                     "best_epoch": summary["best_epoch"], "epochs_run": summary["epochs_run"],
                     "final_loss": summary["final_loss"]})
        if graph.grid.is_main and len(plan) > 1:
            log.info(f"run {i + 1}/{len(plan)} (seed {seed}, split {split}): " + " ".join(
                f"{s} {summary[keys[s]]:.4f}" for s in keys) + f", best epoch {summary['best_epoch']}")
    for key in keys.values():
        mean, std = metrics.mean_std([r[key] for r in runs])
        summary[key], summary[f"{key}_std"] = mean, std
    if len(runs) > 1:  # per run only
        for key in ("best_epoch", "epochs_run", "final_loss"):
            summary.pop(key, None)
    split_kind = graph.meta.get("split_kind") if any(r["split"] is not None for r in runs) else None
    return {**summary, "runs": runs, "splits": cfg.eval.splits, "split_kind": split_kind}


def _digest(obj) -> str:
    """sha256 of a checkpoint's contents (tensor bytes, keys, values), independent of how torch lays out the file."""
    h = hashlib.sha256()

    def walk(o) -> None:
        if isinstance(o, Tensor):
            h.update(f"{o.dtype}{tuple(o.shape)}".encode())
            h.update(o.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(o, dict):
            for k in sorted(o, key=str):
                h.update(repr(k).encode())
                walk(o[k])
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v)
        else:
            h.update(repr(o).encode())

    walk(obj)
    return h.hexdigest()


def _atomic_save(obj, path: Path) -> None:
    """``torch.save`` to a temporary sibling, fsync, rename: ``path`` is the old file or the new, never a part."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
