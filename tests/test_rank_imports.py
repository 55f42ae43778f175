"""A rank does not import what it does not use: no ``torch._dynamo`` (nor the sympy it brings) in training.

``torch.optim.Optimizer`` imports ``torch._dynamo`` at its first call (about 150 MiB per rank); the trainer's
:class:`~gnndist.training.adam.Adam` does not, and gives ``torch.optim.Adam``'s numbers bit for bit.

The ranks are checked in a fresh interpreter (this file run as a script): the test session's pooled ranks
may have imported anything by then.
"""

import json
import subprocess
import sys

import pytest
import torch

from gnndist.config import ModelConfig, OptimConfig, RunConfig, TrainConfig
from gnndist.testing import QUICK_PARTITION, run_distributed
from gnndist.training.adam import Adam

UNUSED = ("torch._dynamo", "sympy")  # modules a training rank has no use for


def train_and_list_imports(grid, partdir: str, checkpoint: str) -> list[str]:
    """One rank: build the trainer on its part, train two epochs (steps, evaluation, checkpoints); which of
    :data:`UNUSED` are imported by then."""
    from gnndist.graph import DistGraph
    from gnndist.training.trainer import Trainer

    graph = DistGraph.load(partdir, grid)
    cfg = TrainConfig(model=ModelConfig(hidden=8), optim=OptimConfig(epochs=2),
                      run=RunConfig(progress=False, checkpoint=checkpoint))
    Trainer(graph, cfg).fit()
    return [m for m in UNUSED if m in sys.modules]


def test_a_training_rank_imports_no_dynamo(tmp_path):
    from gnndist.datasets import synthetic
    from gnndist.partition import partition

    data = synthetic(200, avg_degree=5, num_classes=3, num_features=6, seed=0)
    part = partition(data, 2, **QUICK_PARTITION).save(tmp_path / "p2", dataset="imports", progress=False)
    r = subprocess.run([sys.executable, __file__, str(part), str(tmp_path / "ckpt")], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    imported = json.loads(r.stdout.strip().splitlines()[-1])
    assert imported == [[], []], f"imported by a training rank (per rank): {imported}"


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*shape, generator=g)) for shape in ((37, 5), (5,), (1, 1), (128, 3))]


@pytest.mark.parametrize("foreach", [None, False, True], ids=["default", "per-tensor", "foreach"])
def test_adam_is_torch_adam_bit_for_bit(foreach):
    """Two groups (their own lr and weight decay), a parameter without a gradient at one step, five steps: every
    parameter and moment equal torch.optim.Adam's exactly; each loads the other's state_dict and goes on alike."""
    ours, theirs = _params(0), _params(0)

    def groups(ps):
        return [{"params": ps[:2], "weight_decay": 5e-4}, {"params": ps[2:], "lr": 0.003}]

    mine = Adam(groups(ours), lr=0.01, foreach=foreach)
    ref = torch.optim.Adam(groups(theirs), lr=0.01, foreach=foreach)
    g = torch.Generator().manual_seed(1)
    for step in range(5):
        grads = [torch.randn(p.shape, generator=g) for p in ours]
        for p, q, grad in zip(ours, theirs, grads):
            p.grad = q.grad = None if (step == 2 and p is ours[1]) else grad.clone()
        mine.step()
        ref.step()
        for i, (p, q) in enumerate(zip(ours, theirs)):
            assert torch.equal(p, q), f"step {step}: parameter {i} differs"
    a, b = mine.state_dict(), ref.state_dict()
    assert a["state"].keys() == b["state"].keys()
    for i in a["state"]:
        for key, value in b["state"][i].items():
            assert torch.equal(a["state"][i][key], value), f"state {i} {key}"
    assert [{k: g[k] for k in a["param_groups"][0]} for g in b["param_groups"]] == a["param_groups"]

    # each loads the other's state_dict (its settings too: lr 0.5 is replaced) and takes the same next step
    ours2, theirs2 = ([torch.nn.Parameter(p.detach().clone()) for p in ours] for _ in range(2))
    mine2 = Adam(groups(ours2), lr=0.5, foreach=foreach)
    ref2 = torch.optim.Adam(groups(theirs2), lr=0.5, foreach=foreach)
    mine2.load_state_dict(ref.state_dict())
    ref2.load_state_dict(mine.state_dict())
    for p, q in zip(ours2, theirs2):
        p.grad, q.grad = torch.ones_like(p), torch.ones_like(q)
    mine2.step()
    ref2.step()
    for i, (p, q) in enumerate(zip(ours2, theirs2)):
        assert torch.equal(p, q), f"after load_state_dict: parameter {i} differs"


def test_adam_refuses_what_it_does_not_do():
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match="amsgrad"):
        Adam([{"params": [p], "amsgrad": True}])
    with pytest.raises(ValueError, match="more than one group"):
        Adam([{"params": [p]}, {"params": [p]}])


if __name__ == "__main__":  # the ranks of test_a_training_rank_imports_no_dynamo, in an interpreter of their own
    print(json.dumps(run_distributed(train_and_list_imports, 2, sys.argv[1], sys.argv[2])))
