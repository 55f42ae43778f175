"""The .npy folder input format: memory-mapped, detected by content, partitioned like the in-memory graph;
synthetic graphs generated straight into it; bad inputs one line, exit 2, nothing half-written."""

import errno
import json
import os

import numpy as np
import pytest
import torch
from gnndist.datasets import load, synthetic
from gnndist.datasets.registry import detect_format
from gnndist.datasets.sbm import write_synthetic
from gnndist.partition import partition

from gnndist.cli import main


def _write(folder, data, ids=np.int64, masks=True, **override):
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {"edge_index": data.edge_index.numpy().astype(ids), "x": data.x.numpy(), "y": data.y.numpy()}
    if masks:
        arrays.update({m: getattr(data, m).numpy() for m in ("train_mask", "val_mask", "test_mask")})
    arrays.update(override)
    for k, v in arrays.items():
        np.save(folder / f"{k}.npy", v)
    return folder


@pytest.fixture(scope="module")
def cora():
    return load("cora")


@pytest.mark.parametrize("ids", [np.int32, np.int64])
def test_folder_partitions_like_the_graph_in_memory(tmp_path, cora, ids):
    """Only one direction of each edge, shuffled, with a duplicate and a self-loop: the same parts (checksums)."""
    ei = cora.edge_index.numpy()
    one = ei[:, ei[0] < ei[1]]
    one = one[:, np.random.default_rng(0).permutation(one.shape[1])]
    raw = np.concatenate([one, one[:, :5], [[3], [3]]], axis=1)
    folder = _write(tmp_path / "cora_npy", cora, ids, edge_index=raw.astype(ids))
    assert detect_format(str(folder)) == "npy"
    data = load(str(folder))
    assert data.raw_edges and data.x.shape == cora.x.shape and data.edge_index.dtype.itemsize == np.dtype(ids).itemsize
    a = partition(cora, 3, method="random", progress=False).save(tmp_path / "a", dataset="cora", progress=False)
    b = partition(data, 3, method="random", progress=False).save(tmp_path / "b", dataset="cora", progress=False)
    meta = [json.loads((d / "META.json").read_text()) for d in (a, b)]
    assert meta[0]["sha256"] == meta[1]["sha256"]


def test_synthetic_is_generated_into_a_folder_and_partitions(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["synth", "synthetic-2000-d8", "--out", str(out), "--feature-dim", "5", "--seed", "3"]) == 0
    data = load(str(out))
    assert data.x.shape == (2000, 5) and data.edge_index.shape == (2, 8000) and data.num_classes == 8
    assert int(data.train_mask.sum()) == 8 * 20
    r = partition(data, 4, method="kaminpar", progress=False).report
    assert r["vs_random"] < 0.8 and r["num_nodes"] == 2000
    write_synthetic(str(tmp_path / "t"), 2000, 8, num_features=5, seed=3)
    for f in ("edge_index.npy", "x.npy", "y.npy", "train_mask.npy"):  # the same seed: the same graph
        assert (out / f).read_bytes() == (tmp_path / "t" / f).read_bytes()


def test_a_name_its_folder_and_synthetic_are_one_graph(tmp_path, monkeypatch):
    """One generator: ``synthetic-*`` names load through the folder ``gnndist synth`` writes (so they
    partition at the same peak), and the in-memory `synthetic` is that graph cleaned."""
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "root"))
    by_name = load("synthetic-1500-d8", seed=2)
    assert by_name.raw_edges and by_name.name == "synthetic-1500-d8"
    assert (tmp_path / "root" / "synthetic" / "synthetic-1500-d8-s2" / "meta.json").is_file()
    write_synthetic(str(tmp_path / "f"), 1500, 8, seed=2)
    folder, mem = load(str(tmp_path / "f")), synthetic(1500, avg_degree=8, seed=2)
    assert torch.equal(by_name.x, mem.x) and torch.equal(folder.y, mem.y)
    assert torch.equal(by_name.train_mask, mem.train_mask) and torch.equal(folder.test_mask, mem.test_mask)
    sha = [json.loads((partition(d, 3, method="random", progress=False).save(tmp_path / f"p{i}", dataset="s",
                                                                            progress=False) / "META.json")
                      .read_text())["sha256"] for i, d in enumerate((by_name, folder, mem))]
    assert sha[0] == sha[1] == sha[2]
    assert load("synthetic-1500-d8", seed=2).edge_index.shape == by_name.edge_index.shape  # read again, not redrawn


def _bad(tmp_path, cora, case):
    folder = tmp_path / case
    ei = cora.edge_index.numpy()
    if case == "ids-out-of-range":
        _write(folder, cora, edge_index=np.concatenate([ei, [[0], [cora.num_nodes + 7]]], axis=1))
    elif case == "int32-wrapped":  # ids past 2^31 - 1 cast to int32 come back negative
        big = np.array([[0], [2**31 + 5]], dtype=np.int64).astype(np.int32)
        _write(folder, cora, edge_index=np.concatenate([ei.astype(np.int32), big], axis=1))
    elif case == "not-2xE":
        _write(folder, cora, edge_index=ei.T.copy())
    elif case == "float-ids":
        _write(folder, cora, edge_index=ei.astype(np.float32))
    elif case == "x-rows":
        _write(folder, cora, masks=False, y=cora.y.numpy()[:-3])
    elif case == "truncated":
        _write(folder, cora)
        path = folder / "x.npy"
        path.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])
    return folder


@pytest.mark.parametrize("case,msg", [
    ("ids-out-of-range", "must lie in"),
    ("int32-wrapped", "beyond 2^31 - 1 wrapped around"),
    ("not-2xE", "shape [2, E]"),
    ("float-ids", "must be integer"),
    ("x-rows", "rows but the graph has"),
    ("truncated", "truncated"),
])
def test_bad_folders_are_one_line_and_leave_nothing(tmp_path, cora, capsys, case, msg):
    folder = _bad(tmp_path, cora, case)
    out = tmp_path / "parts"
    assert main(["partition", str(folder), "--parts", "2", "--method", "random", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert msg in err.splitlines()[-1] and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".parts")]


def test_a_disk_that_fills_during_the_write_leaves_nothing(tmp_path, cora, capsys, monkeypatch):
    from gnndist.partition import format as fmt

    calls = []
    real = np.save

    def save(path, arr, **kw):
        calls.append(path)
        if len(calls) > 12:  # part 0 written, part 1 under way
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, arr, **kw)

    monkeypatch.setattr(fmt.np, "save", save)
    out = tmp_path / "parts"
    assert main(["partition", "cora", "--parts", "3", "--method", "random", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and err.count("\n") == 1
    assert not out.exists() and os.listdir(tmp_path) == []


def test_a_disk_too_small_for_the_parts_is_refused_before_writing(tmp_path, cora, capsys, monkeypatch):
    """The space the parts need is checked first, and named; nothing is written."""
    from collections import namedtuple

    from gnndist.partition import format as fmt
    from gnndist.partition import partition

    need = partition(cora, 2, method="random", progress=False).disk_bytes()
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(fmt.shutil, "disk_usage", lambda path: usage(need, need, need // 2))
    out = tmp_path / "parts"
    assert main(["partition", "cora", "--parts", "2", "--method", "random", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not enough space" in err and f"{need / 2**20:.1f} MiB" in err and err.count("\n") == 1, err
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    assert main(["partition", "cora", "--parts", "2", "--method", "random", "--out", str(out)]) == 0
    on_disk = sum(f.stat().st_size for f in out.rglob("*.npy"))
    assert 0.9 * on_disk <= need <= 1.1 * on_disk, (need, on_disk)  # the estimate is what the parts take
