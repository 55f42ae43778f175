"""``gnndist export``: a trained model as a plain file that needs no gnndist partition, or as a PyG model.

    gnndist export --checkpoint CKDIR --out model.pt                 # {"state_dict", "config", "in", "out"}
    gnndist export --checkpoint CKDIR --out pyg.pt --format pyg      # loads into torch_geometric.nn.models.<Model>

The ``pyg`` format is for the models with a twin among PyG's ``BasicGNN`` models (``--model gcn``
-> ``GCN``, ``sage`` -> ``GraphSAGE``, ``gin`` -> ``GIN``, with ``--norm none``): the state dict
is renamed to the twin's parameter names, and the file says how to build it::

    import torch, torch_geometric.nn.models as M
    f = torch.load("pyg.pt")
    model = getattr(M, f["model"])(**f["kwargs"])
    model.load_state_dict(f["state_dict"])
    model.eval()
    logits = model(x, edge_index)      # x row-normalised if f["normalize_features"]

In eval mode the twin gives gnndist's logits (dropout is the only difference in training).
"""

from __future__ import annotations

import os
from pathlib import Path

from gnndist.errors import UserError

PYG_TWINS = {"gcn": "GCN", "sage": "GraphSAGE", "gin": "GIN"}  # --model -> torch_geometric.nn.models.<name>
FORMATS = ("gnndist", "pyg")


def pyg_state(model: str, state: dict) -> dict:
    """``state`` renamed to the parameter names of ``model``'s PyG twin (GIN's MLP: ``nn.0/2`` -> ``nn.lins.0/1``)."""
    if model != "gin":
        return dict(state)
    out = {}
    for k, v in state.items():
        out[k.replace(".nn.0.", ".nn.lins.0.").replace(".nn.2.", ".nn.lins.1.")] = v
    return out


def export(checkpoint: str, out: str, fmt: str = "gnndist", force: bool = False) -> dict:
    """Write the model of ``checkpoint`` to ``out`` (atomically); returns what was written, for the report."""
    from gnndist.checkpoint import atomic_save, load_model_file

    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    target = Path(out)
    if target.exists() and not force:
        raise UserError(f"--out {target} exists: pass --force to replace it")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"--out {target}: {folder} is not a writable folder")
    state, config, path = load_model_file(checkpoint)
    m, f_in, f_out = config["model"], config.get("in_channels"), config.get("out_channels")
    if fmt == "gnndist":
        obj = {"format": "gnndist-model", "state_dict": state, "config": {k: config[k] for k in config
               if k not in ("in_channels", "out_channels")}, "in_channels": f_in, "out_channels": f_out,
               "checkpoint": str(path)}
    else:
        twin = PYG_TWINS.get(m["model"])
        if twin is None or m.get("norm", "none") != "none":
            raise UserError(f"--format pyg is for --model {', '.join(PYG_TWINS)} with --norm none (PyG's BasicGNN "
                            f"twins); this checkpoint holds --model {m['model']} --norm {m.get('norm')}: use "
                            f"--format gnndist")
        if not f_in or not f_out:
            raise UserError(f"{path} does not record the model's widths (a ckpt-*.pt): export its run's best.pt")
        obj = {"format": "pyg", "model": twin, "state_dict": pyg_state(m["model"], state),
               "kwargs": {"in_channels": f_in, "hidden_channels": m["hidden"], "num_layers": m["layers"],
                          "out_channels": f_out},
               "normalize_features": m.get("normalize_features", True), "checkpoint": str(path)}
    try:
        atomic_save(obj, target)
    except OSError as e:
        raise UserError(f"cannot write {target}: {e.strerror or e}") from None
    return {"out": str(target), "format": fmt, "model": m["model"], "in_channels": f_in, "out_channels": f_out,
            "parameters": int(sum(v.numel() for v in state.values())), "checkpoint": str(path)}
