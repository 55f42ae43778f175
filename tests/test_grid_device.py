"""The GPU path checked on CPU: one backend decision per job, staging through host memory, device discipline.

No GPU is needed: machines are simulated by patching ``torch.cuda``; staging runs on CPU
tensors with a mocked collective; and a real 2-rank gloo training runs under a mode that
marks every tensor a GPU run would hold on the host, which the grid's collectives refuse.
"""

import pytest
import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

import gnndist.dist.join as join_mod
from gnndist import launcher
from gnndist.config import TrainConfig
from gnndist.dist.grid import ProcessGrid
from gnndist.dist.join import choose_backend
from gnndist.dist.staging import to_host
from gnndist.errors import UserError
from gnndist.testing import run_distributed


# ---------------------------------------------------------------------- backend decision
@pytest.mark.parametrize("gpus, local, backend, want", [
    (1, 2, "auto", ("gloo", "cuda:0", True)),  # two ranks share one GPU: gloo for both, staged
    (4, 4, "auto", ("nccl", "cuda:1", False)),
    (8, 4, "auto", ("nccl", "cuda:1", False)),
    (0, 2, "auto", ("gloo", "cpu", False)),
    (4, 4, "gloo", ("gloo", "cuda:1", True)),  # --backend gloo with GPUs: on the GPU, staged
], ids=["1gpu-2ranks", "4gpus-4ranks", "8gpus-4ranks", "cpu", "gloo-forced"])
def test_choose_backend(gpus, local, backend, want):
    b, dev, staged = choose_backend(backend, local_rank=1, local_world=local, gpus=gpus)
    assert (b, str(dev), staged) == want


def test_choose_backend_cpu_forced():
    assert choose_backend("auto", 1, 2, gpus=2, device="cpu") == ("gloo", torch.device("cpu"), False)


@pytest.mark.parametrize("gpus", [0, 1])
def test_nccl_without_a_gpu_per_rank_is_one_line(gpus):
    with pytest.raises(UserError, match="--backend nccl needs one GPU per rank") as e:
        choose_backend("nccl", 0, 2, gpus)
    assert "\n" not in str(e.value)


@pytest.fixture
def machine(monkeypatch):
    """``machine(gpus, rank, world)``: simulate this rank's GPUs and environment; records init_process_group."""
    calls = {}

    def setup(gpus: int, rank: int, world: int):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
        monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.setdefault("set_device", d))
        monkeypatch.setattr(join_mod, "split_threads", lambda n: 1)
        monkeypatch.setattr(join_mod.machine, "pin_mmap_threshold", lambda: False)
        monkeypatch.setattr(dist, "is_initialized", lambda: False)
        monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: calls.update(backend=backend, **kw))
        monkeypatch.setattr(dist, "barrier", lambda *a, **k: None)
        monkeypatch.setattr(dist, "all_gather_object",
                            lambda out, obj, **k: out.__setitem__(slice(None), [obj] * world))
        for k, v in dict(RANK=rank, WORLD_SIZE=world, LOCAL_RANK=rank, LOCAL_WORLD_SIZE=world,
                         MASTER_ADDR="127.0.0.1", MASTER_PORT=29999).items():
            monkeypatch.setenv(k, str(v))
        monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
        monkeypatch.delenv("GNNDIST_CHECK_COLLECTIVES", raising=False)  # no process group to check with here
        return calls

    return setup


def test_init_one_gpu_two_ranks_gloo_staged(machine):
    calls = machine(gpus=1, rank=1, world=2)
    grid = launcher.init()
    assert (grid.backend, grid.device, grid.staged) == ("gloo", torch.device("cuda", 0), True)
    assert calls["backend"] == "gloo" and "device_id" not in calls
    assert grid.describe() == "gloo, tensors staged through host memory (2 ranks share 1 GPU)"


def test_init_gpu_per_rank_nccl_with_device_id(machine):
    calls = machine(gpus=4, rank=3, world=4)
    grid = launcher.init()
    assert (grid.backend, grid.device, grid.staged) == ("nccl", torch.device("cuda", 3), False)
    assert calls["backend"] == "nccl" and calls["device_id"] == torch.device("cuda", 3)
    assert grid.describe() == "nccl on cuda:3 (one GPU per local rank)"


def test_init_cpu_gloo(machine):
    calls = machine(gpus=0, rank=0, world=2)
    grid = launcher.init()
    assert (grid.backend, grid.device, grid.staged) == ("gloo", torch.device("cpu"), False)
    assert "device_id" not in calls and grid.describe() == "gloo on cpu"


def test_init_nccl_without_enough_gpus(machine):
    machine(gpus=1, rank=0, world=2)
    with pytest.raises(UserError, match=r"needs one GPU per rank \(2 ranks on this machine, 1 GPUs\)"):
        launcher.init("nccl")


# ---------------------------------------------------------------------- staging
class _Work:
    def __init__(self, done):
        self.done = done

    def wait(self):
        self.done()
        return True


@pytest.fixture
def staged_grid(monkeypatch):
    """A 2-rank staged grid whose collectives are mocked: they record what they got and change it later."""
    seen = []

    def finish(work, async_op):
        if async_op:
            return work
        work.wait()

    def all_reduce(t, op=None, group=None, async_op=False):
        seen.append(t)
        return finish(_Work(lambda: t.mul_(2)), async_op)  # "the other rank" contributes as much again

    def all_to_all_single(out, inp, out_splits=None, in_splits=None, group=None, async_op=False):
        seen.extend([out, inp])
        return finish(_Work(lambda: out.copy_(inp.flip(0))), async_op)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(dist, "all_to_all_single", all_to_all_single)
    return ProcessGrid(rank=0, world_size=2, staged=True), seen


def test_to_host_copies_or_allocates():
    t = torch.arange(4.0)
    h = to_host(t)
    assert h.device.type == "cpu" and h.data_ptr() != t.data_ptr() and torch.equal(h, t)
    e = to_host(t, copy=False)
    assert e.shape == t.shape and e.dtype == t.dtype and e.data_ptr() != t.data_ptr()


def test_staged_all_reduce_runs_on_a_host_copy(staged_grid):
    grid, seen = staged_grid
    t = torch.ones(3)
    assert grid.all_reduce_(t) is t
    assert seen[0] is not t and seen[0].data_ptr() != t.data_ptr()  # the collective saw a host copy
    assert torch.equal(t, torch.full((3,), 2.0))  # and the result came back


def test_staged_async_copies_back_on_wait(staged_grid):
    grid, seen = staged_grid
    out, inp = torch.zeros(4), torch.arange(4.0)
    work = grid.all_to_all_single(out, inp, [2, 2], [2, 2], async_op=True)
    assert torch.equal(out, torch.zeros(4))  # nothing lands before wait()
    work.wait()
    assert torch.equal(out, torch.tensor([3.0, 2.0, 1.0, 0.0])) and torch.equal(inp, torch.arange(4.0))
    assert all(s is not out and s is not inp for s in seen)
    t = torch.ones(2)
    work = grid.all_reduce_(t, async_op=True)
    assert torch.equal(t, torch.ones(2))
    work.wait()
    assert torch.equal(t, torch.full((2,), 2.0))


# ---------------------------------------------------------------------- device discipline
@pytest.mark.parametrize("call", [
    lambda g, t: g.all_reduce_(t),
    lambda g, t: g.broadcast_(t),
    lambda g, t: g.all_to_all_single(torch.empty(1, device="meta"), t),
], ids=["all_reduce_", "broadcast_", "all_to_all_single"])
def test_collective_refuses_a_tensor_off_the_grid_device(call):
    grid = ProcessGrid(device=torch.device("meta"))  # any device but the CPU tensors': no GPU needed
    with pytest.raises(RuntimeError, match=r"grid\.\w+: a tensor on cpu .* whose device is meta"):
        call(grid, torch.zeros(1))


class HostTensors(TorchFunctionMode):
    """Marks (``t._host``) every tensor a GPU run would hold in host memory.

    A tensor is on the host when a factory made it without ``device=`` (``torch.tensor``,
    ``torch.zeros``, ``torch.from_numpy``...), when ``.cpu()`` made it, or when every tensor
    it was computed from is; ``.to(device)`` and ``device=`` put it on the device. Our code
    passes ``device=grid.device`` (CPU here), so what it means to put on the GPU is
    unmarked, and what a GPU run would leave on the host is marked.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is torch.Tensor.data.__set__:
            args[0]._host = getattr(args[1], "_host", False)
            return out
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        moved = "device" in kwargs or (func is torch.Tensor.to and any(
            isinstance(a, (torch.device, str, torch.Tensor)) for a in args[1:]))
        if func is torch.Tensor.cpu:
            host = True
        elif moved:
            host = False
        else:
            host = all(getattr(t, "_host", False) for t in tensors)  # a factory (no tensor input) included
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if moved and any(o is t for o in outs for t in tensors):  # a no-op move on CPU: a new tensor on a GPU
            out = out.view_as(out)
            outs = [out]
        for o in outs:
            if o.__class__ is torch.Tensor or isinstance(o, torch.nn.Parameter):
                o._host = host
        return out


_check = ProcessGrid.check_devices


def _strict_check(grid, name, *tensors):
    """The grid's own check, and: no tensor a GPU run would hold on the host."""
    _check(grid, name, *tensors)
    for t in tensors:
        if getattr(t, "_host", False):
            raise RuntimeError(f"grid.{name}: a tensor that a GPU run would hold on the host (cpu) was handed to "
                               f"a collective on the grid's device; create it with device=grid.device")


def _discipline_job(grid, partdir, ckpt):
    """A training through the launcher's rank body (load, checks, fit with batch norm, checkpoints) under the mode."""
    import numpy as np

    from gnndist.train import train_rank

    ProcessGrid.check_devices = _strict_check
    from_numpy = torch.from_numpy
    torch.from_numpy = lambda a: _mark(from_numpy(a))
    try:
        with HostTensors():
            assert getattr(torch.tensor([1.0]), "_host", False)  # the mode marks what it should
            assert not getattr(torch.tensor([1.0]).to(grid.device), "_host", True)
            assert getattr(torch.from_numpy(np.zeros(1)), "_host", False)
            cfg = TrainConfig()
            cfg.model.model, cfg.model.norm, cfg.model.hidden = "gcn", "batch", 8
            cfg.optim.epochs = 2
            cfg.run.progress = False
            cfg.run.checkpoint = ckpt
            cfg.dist.backend = "gloo"
            cfg.dist.strategy, cfg.dist.replication = "1.5d", 2
            return train_rank(grid, str(partdir), cfg).last.final_loss
    finally:
        ProcessGrid.check_devices = _check
        torch.from_numpy = from_numpy


def _mark(t):
    t._host = True
    return t


def test_training_hands_collectives_only_device_tensors(part2, tmp_path):
    """A 2-rank training where every tensor a GPU run would keep on the host is refused by the collectives."""
    losses = run_distributed(_discipline_job, 2, part2, str(tmp_path / "ckpt"))
    assert losses[0] == losses[1] and losses[0] == losses[0]

