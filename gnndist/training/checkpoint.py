"""Checkpoints of a run: written atomically on rank 0 with a checksum, resumed from the newest good one.

A checkpoint ``DIR/ckpt-<epoch>.pt`` holds the model, the optimiser, the epoch, the best
epoch so far, the RNG state and the config, with a sha256 of its contents; ``DIR/best.pt``
holds the weights of the best validation epoch. Every write goes to a temporary file, is
flushed to disk and renamed, so a kill or a full disk never leaves a partial file under a
checkpoint's name. All ranks fail together when rank 0 cannot write.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

from gnndist.datasets.schema import HeteroSchema
from gnndist.dist.grid import ProcessGrid
from gnndist.errors import PeerFailed, UserError, first_line
from gnndist.files import atomic_file
from gnndist.nn.node_embedding import own_state, whole_state
from gnndist.training.summary import Best

log = logging.getLogger("gnndist")
CHECKPOINT_FORMAT = 2  # 2: "best" holds the run's metric as val/train/test (1: *_acc keys)


class Checkpoints:
    """The checkpoint directory of one run.

    Args:
        directory: ``--checkpoint DIR`` (created on rank 0; stale temporary files removed).
        grid: the process grid (rank 0 writes; all ranks read).
        every: ``--checkpoint-every`` epochs (and the last epoch).
        keep: ``--keep-checkpoints``: the newest are kept.
        epochs: the run's epochs (the last one is always saved).
    """

    def __init__(self, directory: str, grid: ProcessGrid, every: int = 1, keep: int = 3, epochs: int = 1):
        self.dir, self.grid, self.every, self.keep, self.epochs = Path(directory), grid, every, keep, epochs
        self._agree(self._prepare, "could not be created")

    def _prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied", str(self.dir))
        for stale in self.dir.glob(".*.pt.*tmp"):  # left by a run killed mid-write (gnndist.files.atomic_file)
            stale.unlink(missing_ok=True)

    def _agree(self, action: Callable[[], None], what: str) -> None:
        """Run ``action`` on rank 0 and fail on every rank together if it raised ``OSError``."""
        error = None
        if self.grid.is_main:
            try:
                action()
            except OSError as e:
                error = e
        failed = self.grid.all_reduce_(torch.tensor([float(error is not None)], device=self.grid.device))
        if error is not None:
            path = error.filename or self.dir
            why = "it is a file, not a directory" if isinstance(error, (FileExistsError, NotADirectoryError)) \
                else error.strerror or error
            raise UserError(f"checkpoint {path} {what}: {why}") from None
        if failed.item() > 0:
            raise PeerFailed(f"rank {self.grid.rank}: rank 0 could not write the checkpoint")

    def found(self) -> list[Path]:
        """The checkpoints in the directory, oldest first."""
        return sorted(self.dir.glob("ckpt-*.pt"))

    def _read(self, path: Path) -> dict:
        """A checkpoint's state, checked (format and checksum); raises on a corrupt one."""
        state = torch.load(path, map_location=self.grid.device, weights_only=True)
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"not a gnndist checkpoint of format {CHECKPOINT_FORMAT}")
        if state.pop("sha256", None) != digest(state):
            raise ValueError("checksum mismatch")  # a flipped bit loads without complaint otherwise
        return state

    def _newest_readable(self) -> tuple[Path | None, dict | None, list[str], int]:
        """``(path, state, skipped, count)``: the newest checkpoint that reads back whole and its state (``None``:
        none does), the ones skipped on the way (each with why), and how many there are."""
        found, skipped = self.found(), []
        for path in reversed(found):
            try:
                return path, self._read(path), skipped, len(found)
            except Exception as e:  # truncated, bit-flipped or foreign: try the one before
                skipped.append(f"{path} ({first_line(e).split('. ')[0]})")
        return None, None, skipped, len(found)

    def save(self, epoch: int, model: nn.Module, optim: torch.optim.Optimizer, best: Best, config: dict,
             widths: tuple[int, int] = (0, 0), edge_dim: int = 0, hetero: HeteroSchema | None = None) -> None:
        """Checkpoint every ``every`` epochs (and the last), and ``best.pt`` when ``best`` is this epoch
        (with the model's input and output ``widths``, the edge features' ``edge_dim`` and a typed graph's
        schema ``hetero``, stored in META.json's form: what rebuilding it off the partition needs besides the
        config)."""
        due = (epoch + 1) % self.every == 0 or epoch == self.epochs - 1
        improved = best.epoch == epoch
        if not (due or improved):
            return
        msd, osd = whole_state(model, optim, self.grid)  # embedding rows gathered: the whole table (collective)

        def write() -> None:
            if due:
                state = {"format": CHECKPOINT_FORMAT, "model": msd, "optim": osd,
                         "epoch": epoch, "best": vars(best).copy(), "rng": torch.get_rng_state(), "config": config}
                atomic_save({**state, "sha256": digest(state)}, self.dir / f"ckpt-{epoch:06d}.pt")
                for old in self.found()[: -self.keep]:
                    old.unlink(missing_ok=True)
            if improved:  # the weights and the config that built them: enough to apply the model (gnndist predict)
                best_state = {"format": CHECKPOINT_FORMAT, "model": msd, "epoch": epoch, "config": config,
                              "in_channels": widths[0], "out_channels": widths[1], "edge_dim": edge_dim,
                              **({"hetero": hetero.to_meta()} if hetero is not None else {})}
                atomic_save({**best_state, "sha256": digest(best_state)}, self.dir / "best.pt")

        self._agree(write, "could not be written")

    def resume(self, model: nn.Module, optim: torch.optim.Optimizer, required: bool) -> tuple[int, Best] | None:
        """Load the newest readable checkpoint into ``model`` and ``optim``; ``(next epoch, best)``, or None if none.

        Corrupt or truncated checkpoints are skipped (a warning each). Rank 0 chooses the file and every rank
        reads that one (collective): hosts sharing the directory may list it at different moments, and ranks
        resuming from different epochs would run different steps. A rank that cannot read it fails them all.
        """
        path, state, skipped, count = self._newest_readable() if self.grid.is_main else (None, None, [], 0)
        path, skipped, count = self.grid.share((str(path) if path else None, skipped, count))  # rank 0's choice
        if not count:
            if required:
                raise UserError(f"--resume: no checkpoint in {self.dir} (ckpt-*.pt); train with --checkpoint "
                                f"{self.dir} first")
            return None
        if path is None:
            raise UserError(f"no readable checkpoint in {self.dir}: all {count} are corrupt, e.g. {skipped[0]}")
        for line in skipped if self.grid.is_main else ():
            log.warning(f"skipped the unreadable checkpoint {line}")
        path, error = Path(path), None
        try:
            state = state if state is not None else self._read(path)  # rank 0 has read it already
        except Exception as e:
            error = e
        failed = self.grid.all_reduce_(torch.tensor([float(error is not None)], device=self.grid.device))
        if error is not None:
            raise UserError(f"rank {self.grid.rank}: cannot read {path}, the checkpoint rank 0 resumes from: "
                            f"{first_line(error)}") from None
        if failed.item() > 0:
            raise PeerFailed(f"rank {self.grid.rank}: another rank cannot read {path}, the checkpoint to resume from")
        state["model"], state["optim"] = own_state(model, state["model"], optim, state["optim"])  # this rank's rows
        check_same_model(path, state, model)
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        torch.set_rng_state(state["rng"].cpu())
        start = int(state["epoch"]) + 1
        if self.grid.is_main:
            log.info(f"resumed from {path} (epoch {start} of {self.epochs})")
        return start, Best(**state["best"])


def load_model_file(path: str | Path, device: torch.device | str = "cpu") -> tuple[dict, dict, Path]:
    """The weights and training config of a checkpoint (``ckpt-*.pt`` or ``best.pt``, or a ``--checkpoint`` DIR:
    its ``best.pt``), checked against its sha256; ``(state_dict, config, file)``; one line when unusable.
    ``config`` also holds ``in_channels`` / ``out_channels`` / ``edge_dim`` (and a typed graph's ``hetero`` schema)
    where the file has them (``best.pt``)."""
    p = Path(path)
    if p.is_dir():
        p = p / "best.pt"
    if not p.is_file():
        raise UserError(f"no checkpoint at {p} (give a --checkpoint DIR of gnndist train, or its best.pt / ckpt-*.pt)")
    try:
        state = torch.load(p, map_location=device, weights_only=True)
    except Exception as e:  # truncated or not a torch file
        raise UserError(f"{p} is not a readable checkpoint ({first_line(e)})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or "config" not in state:
        raise UserError(f"{p} is not a gnndist checkpoint of format {CHECKPOINT_FORMAT} with its config (a best.pt "
                        f"written before 2026-12-01 holds weights only: use a ckpt-*.pt of the same run)")
    if state.pop("sha256", None) != digest(state):
        raise UserError(f"{p} is corrupt: its contents do not match its sha256")
    widths = {k: state[k] for k in ("in_channels", "out_channels", "edge_dim", "hetero") if k in state}
    return state["model"], {**state["config"], **widths}, p


def check_same_model(path: Path, state: dict, model: nn.Module) -> None:
    """One line when the checkpoint holds another model (names or shapes differ)."""
    mine = {k: tuple(v.shape) for k, v in model.state_dict().items()}
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


def digest(obj) -> str:
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


def atomic_save(obj, path: Path) -> None:
    """``torch.save`` to a temporary sibling, fsync, rename: ``path`` is the old file or the new, never a part."""
    with atomic_file(path, "wb", fsync=True) as f:
        torch.save(obj, f)
