"""Adam as ``torch.optim.Adam`` computes it, without ``torch.optim.Optimizer`` (whose first use imports torch._dynamo).

In torch 2.13 ``Optimizer``'s constructor (``add_param_group``), ``zero_grad`` and ``(load_)state_dict`` are
wrapped in ``torch._disable_dynamo``, ``Adam.step`` calls ``torch._dynamo.graph_break`` and the functional
``adam`` is wrapped too: the first of them imports ``torch._dynamo`` with sympy (and triton where installed),
148 MiB resident in every rank, for a step that is never compiled. This class keeps the same state (``step``,
``exp_avg``, ``exp_avg_sq`` per parameter; ``state_dict`` in torch's layout: checkpoints load either way) and
calls the update ``torch.optim.Adam`` would call on the same tensors, torch's own single-tensor or multi-tensor
(foreach) function chosen by torch's own rule, so every number is the same bit for bit
(``tests/test_rank_imports.py`` compares the two, both paths).

    optim = Adam(model.parameters(), lr=0.01, weight_decay=5e-4)   # or a list of groups, as torch takes
    optim.zero_grad(); loss.backward(); optim.step()
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import Tensor

# torch's private update functions and its foreach rule: what torch.optim.Adam.step runs, minus the decorators
# (their signatures are checked against torch.optim.Adam by tests/test_rank_imports.py at every torch version)
from torch.optim.adam import _multi_tensor_adam, _single_tensor_adam
from torch.optim.optimizer import _default_to_fused_or_foreach

HYPER = ("lr", "betas", "eps", "weight_decay", "foreach")  # a group's settings, as torch's state_dict names them


class Adam:
    """Adam (L2 weight decay added to the gradient), Kingma and Ba 2015, https://arxiv.org/abs/1412.6980.

    Args:
        params: parameters, or dicts of ``params`` and any of the settings below (parameter groups).
        lr: learning rate (default 1e-3).
        betas: decay rates of the moments (default (0.9, 0.999)).
        eps: added to the denominator (default 1e-8).
        weight_decay: L2 penalty added to the gradient (default 0).
        foreach: the multi-tensor update (True), the per-tensor one (False), or torch's choice for the
            parameters' devices (None, default: foreach on CUDA, per tensor on the CPU).
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, foreach: bool | None = None):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, foreach=foreach)
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.param_groups: list[dict] = []
        for group in groups:
            unknown = set(group) - {"params", *HYPER}
            if unknown:
                raise ValueError(f"Adam: unknown parameter group settings {sorted(unknown)}")
            self.param_groups.append({"params": list(group["params"]), **defaults,
                                      **{k: v for k, v in group.items() if k != "params"}})
        seen = [id(p) for g in self.param_groups for p in g["params"]]
        if len(seen) != len(set(seen)):
            raise ValueError("Adam: a parameter appears in more than one group")
        self.state: dict[Tensor, dict[str, Tensor]] = {}  # per parameter: step, exp_avg, exp_avg_sq

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every gradient (``set_to_none``), or zero it in place."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().requires_grad_(False).zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient (as ``torch.optim.Adam.step()``)."""
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            state = [self._state_of(p) for p in params]
            foreach = group["foreach"]
            if foreach is None:
                foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)[1]
            update = _multi_tensor_adam if foreach else _single_tensor_adam
            beta1, beta2 = group["betas"]
            update(params, [p.grad for p in params], [s["exp_avg"] for s in state], [s["exp_avg_sq"] for s in state],
                   [], [s["step"] for s in state], None, None, amsgrad=False,
                   has_complex=any(torch.is_complex(p) for p in params), beta1=beta1, beta2=beta2, lr=group["lr"],
                   weight_decay=group["weight_decay"], eps=group["eps"], maximize=False, capturable=False,
                   differentiable=False, decoupled_weight_decay=False)

    def _state_of(self, p: Tensor) -> dict[str, Tensor]:
        """``p``'s moments and step count, made at its first update as torch makes them (the step a CPU scalar)."""
        if p not in self.state:
            scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
            self.state[p] = {"step": torch.tensor(0.0, dtype=scalar),
                             "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                             "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
        return self.state[p]

    def state_dict(self) -> dict:
        """``{"state": {index: moments}, "param_groups": [settings and parameter indices]}``, torch's layout.

        The state's tensors are the live ones (as torch returns them): copy before changing.
        """
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        groups = [{**{k: g[k] for k in HYPER}, "params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]
        return {"state": {index[id(p)]: s for p, s in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Take the settings and moments of a :meth:`state_dict` (or ``torch.optim.Adam``'s) of the same groups."""
        saved = copy.deepcopy(state_dict["param_groups"])
        if [len(g["params"]) for g in saved] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError("loaded state dict has parameter groups of other sizes than this optimiser's")
        params = {}
        for group, old in zip(self.param_groups, saved):
            group.update({k: (tuple(old[k]) if k == "betas" else old[k]) for k in HYPER if k in old})
            params.update(zip(old["params"], group["params"]))
        self.state = {}
        for i, moments in state_dict["state"].items():
            p = params[i]
            self.state[p] = {k: (v if k == "step" else v.to(device=p.device, dtype=p.dtype))
                             if torch.is_tensor(v) else torch.tensor(float(v)) for k, v in moments.items()}
