"""Bad inputs: each gives exactly one clear line on standard error and exit 2, no traceback, no partial output.

One case per kind of mistake a user makes (names, paths, files, data, flags, checkpoints);
each case builds what it needs under ``tmp_path`` and returns the argv and the words its
line must hold.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gnndist.cli import main


def _graph_file(tmp, **change):
    """A small saved graph (``torch.save`` of a dict) with ``change`` applied, e.g. a NaN feature."""
    n = 30
    g = {"x": torch.rand(n, 4), "y": torch.arange(n) % 3, "num_classes": 3,
         "edge_index": torch.stack([torch.arange(n), (torch.arange(n) + 1) % n]),
         "train_mask": torch.arange(n) < 10, "val_mask": (torch.arange(n) >= 10) & (torch.arange(n) < 20),
         "test_mask": torch.arange(n) >= 20}
    for key, fn in change.items():
        g[key] = fn(g[key])
    path = tmp / "graph.pt"
    torch.save(g, path)
    return str(path)


def _hetero_file(tmp):
    """A small heterophily-benchmark npz (Platonov et al. layout) with 2 shipped splits."""
    import numpy as np

    n = 20
    masks = np.zeros((2, n), dtype=bool)
    masks[:, :10] = True
    np.savez(tmp / "minesweeper.npz", node_features=np.ones((n, 3), np.float32), node_labels=np.arange(n) % 2,
             edges=np.stack([np.arange(n), (np.arange(n) + 1) % n], 1), train_masks=masks, val_masks=~masks,
             test_masks=~masks)
    return str(tmp / "minesweeper.npz")


def _typed_file(tmp, edit=None):
    """A small saved PyG HeteroData (synthetic-mag's shape) with ``edit(hd)`` applied."""
    from gnndist.datasets.hetero import synthetic_mag

    hd = synthetic_mag(60, num_classes=3, num_features=4, seed=2)
    if edit is not None:
        edit(hd)
    path = tmp / "typed.pt"
    torch.save(hd, path)
    return str(path)


def _edit(fn):
    """``fn(hd)`` for its effect, as an edit returning nothing."""
    return lambda hd: fn(hd) and None


def _typed_partition(tmp, parts=1):
    from gnndist.datasets import load
    from gnndist.partition import partition

    d = tmp / f"typed-p{parts}"
    partition(load(_typed_file(tmp)), parts, progress=False).save(d, dataset="typed", progress=False)
    return str(d)


def _copy(src, tmp, name="copy"):
    dst = tmp / name
    shutil.copytree(src, dst)
    return dst


def _set(t, index, value):
    t = t.clone()
    t[index] = value
    return t


def _meta(d, **change):
    meta = json.loads((d / "META.json").read_text())
    meta.update(change)
    (d / "META.json").write_text(json.dumps(meta))
    return d


def _flip_byte(path):
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40
    path.write_bytes(bytes(data))


def _checkpoint(part1, tmp, hidden="16"):
    ck = tmp / "ck"
    assert main(["train", str(part1), "--epochs", "2", "--no-progress", "--hidden", hidden,
                 "--checkpoint", str(ck)]) == 0
    return ck


def _corrupt_all(ck):
    for p in ck.glob("ckpt-*.pt"):
        p.write_bytes(p.read_bytes()[:500])
    return ck


def _full_disk(monkeypatch):
    def no_space(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", no_space)


TRAIN1 = ["--epochs", "2", "--no-progress"]


def _link_partition(tmp, name="toy", fractions=(0.8, 0.1, 0.1), edit=None, valedges=False):
    """A 1-part partition of a small graph with a random edge split (``edit(split)`` applied first; ``valedges``:
    with the message graph of training + validation edges)."""
    from gnndist.datasets import synthetic
    from gnndist.datasets.edge_split import random_edge_split, set_edge_split
    from gnndist.partition import partition

    data = synthetic(120, avg_degree=6, num_classes=3, num_features=5, seed=4)
    split, message = random_edge_split(data.edge_index, 120, fractions, seed=0)
    if edit is not None:
        edit(split)
    set_edge_split(data, split, message)
    out = tmp / f"link-{name}"
    partition(data, 1, progress=False).save(out, dataset=name, progress=False, valedges=valedges)
    return str(out)


def _link_checkpoint(tmp):
    d = _link_partition(tmp)
    assert main(["train", d, "--epochs", "1", "--no-progress", "--checkpoint", str(tmp / "lk")]) == 0
    return d, str(tmp / "lk")


def _pairs(tmp, arr):
    import numpy as np

    np.save(tmp / "pairs.npy", np.asarray(arr))
    return str(tmp / "pairs.npy")

CASES = {
    # names and paths
    "unknown-dataset": lambda t, p1, p2, mp: (["run", "no-such-graph", "--root", str(t)], "unknown dataset"),
    "missing-path": lambda t, p1, p2, mp: (["partition", str(t / "nope" / "g.npz"), "--parts", "2"],
                                           "no such file or folder"),
    "empty-file": lambda t, p1, p2, mp: ((t / "e.txt").write_text("") and None
                                         or ["partition", str(t / "e.txt"), "--parts", "2"],
                                         "format not recognised; pass --format"),
    "text-file": lambda t, p1, p2, mp: ((t / "n.txt").write_text("hello\nworld\n") and None
                                        or ["partition", str(t / "n.txt"), "--parts", "2"],
                                        "format not recognised; pass --format"),
    "unknown-format": lambda t, p1, p2, mp: (["partition", _graph_file(t), "--parts", "2", "--format", "xml"],
                                             "unknown --format 'xml'"),
    "not-a-partition-dir": lambda t, p1, p2, mp: (["train", str(t)] + TRAIN1, "not a gnndist partition directory"),
    "info-not-a-partition": lambda t, p1, p2, mp: (["info", str(t)], "not a gnndist partition directory"),
    # partition files
    "missing-part-file": lambda t, p1, p2, mp: (
        (_copy(p1, t) / "part-0" / "x.npy").unlink() or ["train", str(t / "copy")] + TRAIN1,
        "missing partition file"),
    "truncated-part-file": lambda t, p1, p2, mp: (
        (_copy(p2, t) / "part-0" / "col.npy").write_bytes(b"\x93NUMPY") and None
        or ["train", str(t / "copy"), "--ranks", "2"] + TRAIN1, "checksum mismatch"),
    "bit-flipped-part-file": lambda t, p1, p2, mp: (
        _flip_byte(_copy(p1, t) / "part-0" / "x.npy") or ["train", str(t / "copy")] + TRAIN1, "checksum mismatch"),
    "info-emptied-part-file": lambda t, p1, p2, mp: (
        (_copy(p2, t) / "part-1" / "x.npy").write_bytes(b"") and None or ["info", str(t / "copy")],
        "checksum mismatch"),
    "info-missing-part-file": lambda t, p1, p2, mp: (
        (_copy(p2, t) / "part-1" / "col.npy").unlink() or ["info", str(t / "copy"), "--json"],
        "missing partition file"),
    "meta-other-format-version": lambda t, p1, p2, mp: (
        ["train", str(_meta(_copy(p1, t), format_version=99))] + TRAIN1,
        "partition format version 99 is not supported"),
    "meta-not-json": lambda t, p1, p2, mp: (
        (_copy(p1, t) / "META.json").write_text("{half") and None or ["train", str(t / "copy")] + TRAIN1,
        "META.json is corrupt"),
    "world-size-not-parts": lambda t, p1, p2, mp: (["train", str(p2), "--ranks", "3"] + TRAIN1,
                                                   "has 2 parts but --ranks is 3"),
    # data
    "parts-above-nodes": lambda t, p1, p2, mp: (["partition", _graph_file(t), "--parts", "31"],
                                                "--parts 31 exceeds the number of nodes (30)"),
    "parts-zero": lambda t, p1, p2, mp: (["partition", _graph_file(t), "--parts", "0"], "--parts must be >= 1"),
    "negative-edge-id": lambda t, p1, p2, mp: (
        ["partition", _graph_file(t, edge_index=lambda e: _set(e, (0, 3), -4)), "--parts", "2"], "out of range"),
    "edge-id-above-n": lambda t, p1, p2, mp: (
        ["partition", _graph_file(t, edge_index=lambda e: _set(e, (1, 3), 30)), "--parts", "2"], "out of range"),
    "nan-features": lambda t, p1, p2, mp: (
        ["partition", _graph_file(t, x=lambda x: _set(x, (2, 1), float("nan"))), "--parts", "2"], "NaN or Inf"),
    "labels-out-of-range": lambda t, p1, p2, mp: (
        ["partition", _graph_file(t, y=lambda y: _set(y, 5, 7)), "--parts", "2"], "labels out of range"),
    "no-training-nodes": lambda t, p1, p2, mp: (
        ["run", _graph_file(t, train_mask=lambda m: m & False), "--root", str(t / "root")] + TRAIN1,
        "no training nodes"),
    # outputs
    "unwritable-output-dir": lambda t, p1, p2, mp: (
        (t / "file").write_text("x") and None or ["partition", _graph_file(t), "--parts", "2", "--out",
                                                  str(t / "file" / "out")], "cannot write the partition to"),
    "checkpoint-dir-is-a-file": lambda t, p1, p2, mp: (
        (t / "f").write_text("x") and None or ["train", str(p1), "--checkpoint", str(t / "f")] + TRAIN1,
        "could not be created: it is a file, not a directory"),
    "full-disk-during-checkpoint": lambda t, p1, p2, mp: (
        _full_disk(mp) or ["train", str(p1), "--checkpoint", str(t / "ck")] + TRAIN1,
        "could not be written: No space left on device"),
    # checkpoints
    "checkpoint-of-another-model": lambda t, p1, p2, mp: (
        ["train", str(p1), "--checkpoint", str(_checkpoint(p1, t)), "--resume", "--hidden", "32", "--epochs", "4",
         "--no-progress"], "holds a different model (--model gcn --layers 2 --hidden 16)"),
    "resume-without-checkpoint": lambda t, p1, p2, mp: (
        ["train", str(p1), "--checkpoint", str(t / "empty"), "--resume"] + TRAIN1, "--resume: no checkpoint in"),
    "resume-all-checkpoints-corrupt": lambda t, p1, p2, mp: (
        ["train", str(p1), "--checkpoint", str(_corrupt_all(_checkpoint(p1, t))), "--resume", "--epochs", "4",
         "--no-progress"], "no readable checkpoint"),
    # flags
    "strategy-2d-non-square": lambda t, p1, p2, mp: (["train", str(p2), "--ranks", "2", "--strategy", "2d"] + TRAIN1,
                                                     "--strategy 2d needs a square number of ranks >= 4, got 2"),
    "backend-nccl-without-gpu": lambda t, p1, p2, mp: (["train", str(p2), "--ranks", "2", "--backend", "nccl"]
                                                       + TRAIN1, "--backend nccl needs one GPU per rank"),
    "run-with-parts": lambda t, p1, p2, mp: (["run", "cora", "--parts", "4"], "the parts are --ranks N"),
    "invalid-choice": lambda t, p1, p2, mp: (["train", str(p1), "--strategy", "3d"], "invalid choice: '3d'"),
    "epochs-zero": lambda t, p1, p2, mp: (["train", str(p1), "--epochs", "0"], "--epochs must be >= 1"),
    "checkpoint-every-zero": lambda t, p1, p2, mp: (["train", str(p1), "--checkpoint", str(t / "ck"),
                                                     "--checkpoint-every", "0"], "--checkpoint-every must be >= 1"),
    "timeout-zero": lambda t, p1, p2, mp: (["train", str(p1), "--timeout", "0"], "--timeout must be > 0"),
    "not-a-number": lambda t, p1, p2, mp: (["train", str(p1), "--hidden", "wide"], "invalid int value: 'wide'"),
    # evaluation protocol
    "unknown-metric": lambda t, p1, p2, mp: (["train", str(p1), "--metric", "accuracy"] + TRAIN1,
                                         "unknown --metric 'accuracy'"),
    "link-metric-on-node-task": lambda t, p1, p2, mp: (["train", str(p1), "--metric", "auc"] + TRAIN1,
                                                   "--metric auc is a link-prediction metric"),
    "rocauc-on-multiclass": lambda t, p1, p2, mp: (["train", str(p1), "--metric", "rocauc"] + TRAIN1,
                                                   "--metric rocauc needs a binary or multi-label dataset"),
    "runs-zero": lambda t, p1, p2, mp: (["train", str(p1), "--runs", "0"] + TRAIN1, "--runs must be >= 1"),
    "splits-all-without-splits": lambda t, p1, p2, mp: (["train", str(p1), "--splits", "all"] + TRAIN1,
                                                        "--splits all: toy ships no splits"),
    "split-without-splits": lambda t, p1, p2, mp: (["train", str(p1), "--split", "1"] + TRAIN1, "ships no splits"),
    "split-out-of-range": lambda t, p1, p2, mp: (
        ["run", _hetero_file(t), "--root", str(t / "root"), "--split", "3"] + TRAIN1,
        "--split 3 is out of range: minesweeper ships 2 splits (0..1)"),
    "split-and-splits-all": lambda t, p1, p2, mp: (["train", str(p1), "--split", "1", "--splits", "all"] + TRAIN1,
                                                   "--split 1 picks one split"),
    "splits-random-without-random-splits": lambda t, p1, p2, mp: (
        ["train", str(p2), "--ranks", "2", "--splits", "random", "--runs", "2"] + TRAIN1, "holds no random splits"),
    # heterogeneous graphs (issue 34)
    "hetero-target-unlabelled": lambda t, p1, p2, mp: (["partition", _typed_file(t), "--parts", "2", "--target",
                                                        "author"], "--target 'author' has no labels in typed"),
    "hetero-target-unknown-type": lambda t, p1, p2, mp: (["partition", _typed_file(t), "--parts", "2", "--target",
                                                          "venue"], "--target 'venue' is not a node type of typed"),
    "hetero-target-on-homogeneous": lambda t, p1, p2, mp: (["partition", _graph_file(t), "--parts", "2", "--target",
                                                            "paper"], "is not a heterogeneous graph"),
    "hetero-relation-unknown-type": lambda t, p1, p2, mp: (
        ["partition", _typed_file(t, _edit(lambda hd: hd["paper", "in", "journal"].__setattr__(
            "edge_index", torch.zeros(2, 1, dtype=torch.long)))), "--parts", "2"],
        "relation (paper, in, journal) names the unknown node type 'journal'"),
    "hetero-ids-out-of-range": lambda t, p1, p2, mp: (
        ["partition", _typed_file(t, _edit(lambda hd: hd["author", "writes", "paper"].edge_index.__setitem__(
            (1, 0), 60))), "--parts", "2"], "destination ids in [0, 60] are out of range for type 'paper'"),
    "hetero-type-without-nodes": lambda t, p1, p2, mp: (
        ["partition", _typed_file(t, _edit(lambda hd: hd["institution"].__setattr__("num_nodes", 0))), "--parts",
         "2"], "node type 'institution' has no nodes"),
    "hetero-labels-without-split": lambda t, p1, p2, mp: (
        ["partition", _typed_file(t, _edit(lambda hd: hd["paper"].__delattr__("test_mask"))), "--parts", "2"],
        "type 'paper' has labels but no split (test_mask missing)"),
    "hetero-rgcn-on-homogeneous": lambda t, p1, p2, mp: (["train", str(p1), "--model", "rgcn"] + TRAIN1,
                                                         "--model rgcn is for a heterogeneous graph"),
    "hetero-rgcn-strategy-auto": lambda t, p1, p2, mp: (
        ["train", _typed_partition(t), "--model", "rgcn", "--strategy", "auto"] + TRAIN1,
        "--model rgcn runs on --strategy 1d only"),
    "hetero-num-bases-on-gcn": lambda t, p1, p2, mp: (["train", str(p1), "--num-bases", "2"] + TRAIN1,
                                                      "--num-bases is for --model rgcn, not --model gcn"),
    "no-bias-on-gat": lambda t, p1, p2, mp: (["train", str(p1), "--model", "gat", "--no-bias"] + TRAIN1,
                                             "--no-bias is for --model gcn, sage (--arch plain), not --model gat"),
    "edge-weights-without-weights": lambda t, p1, p2, mp: (["train", str(p1), "--edge-weights"] + TRAIN1,
                                                           "--edge-weights: the partition of toy holds no edge"),
    "edge-weights-on-sage": lambda t, p1, p2, mp: (["train", str(p1), "--model", "sage", "--edge-weights"] + TRAIN1,
                                                   "weighs GCN's normalisation: --model gcn, not --model sage"),
    "edge-weights-on-2d": lambda t, p1, p2, mp: (["train", str(p1), "--strategy", "2d", "--edge-weights"] + TRAIN1,
                                                 "--edge-weights aggregates over the 1D halo: --strategy 1d (or auto)"),
    "embedding-learn-on-a-homogeneous-node-task": lambda t, p1, p2, mp: (
        ["train", str(p1), "--embedding", "learn"] + TRAIN1, "--embedding learn is for a typed graph's featureless"),
    "hetero-balance-types-on-homogeneous": lambda t, p1, p2, mp: (
        ["partition", _graph_file(t), "--parts", "2", "--balance", "types"],
        "--balance types balances every node type of a heterogeneous graph; this graph has one node type"),
    "hetero-balance-types-kaminpar": lambda t, p1, p2, mp: (
        ["partition", _typed_file(t), "--parts", "2", "--method", "kaminpar", "--balance", "types"],
        "--method kaminpar balances one node weight, not"),
    "clip-grad-negative": lambda t, p1, p2, mp: (["train", str(p1), "--clip-grad", "-1"] + TRAIN1,
                                                 "--clip-grad must be >= 0 (0: no clipping), got -1.0"),
    "lr-decay-every-negative": lambda t, p1, p2, mp: (["train", str(p1), "--lr-decay-every", "-1"] + TRAIN1,
                                                      "--lr-decay-every must be >= 0 (0: no decay), got -1"),
    "link-negatives-zero": lambda t, p1, p2, mp: (["train", _link_partition(t), "--negatives", "0"] + TRAIN1,
                                                  "--negatives must be >= 1, got 0"),
    "link-decoder-layers-zero": lambda t, p1, p2, mp: (["train", _link_partition(t), "--decoder-layers", "0"] + TRAIN1,
                                                       "--decoder-layers must be >= 1, got 0"),
    "link-decoder-layers-on-dot": lambda t, p1, p2, mp: (
        ["train", _link_partition(t), "--decoder", "dot", "--decoder-layers", "2"] + TRAIN1,
        "--decoder-layers 2 is for an MLP decoder (mlp, mlp-norm, mlp-res); this run's decoder is dot"),
    "link-clip-grad-apart-on-a-node-task": lambda t, p1, p2, mp: (
        ["train", str(p1), "--clip-grad", "1", "--clip-grad-apart"] + TRAIN1,
        "--clip-grad-apart clips a link model's encoder and decoder apart: it is for --task link"),
    "link-clip-grad-apart-without-a-norm": lambda t, p1, p2, mp: (
        ["train", _link_partition(t), "--clip-grad-apart"] + TRAIN1,
        "--clip-grad-apart clips to --clip-grad NORM: give it"),
    "unknown-recipe": lambda t, p1, p2, mp: (["train", str(p1), "--recipe", "nope"] + TRAIN1,
                                             "unknown --recipe 'nope'; known: auto, none, amazon, gae"),
    # link prediction
    "link-task-without-edge-split": lambda t, p1, p2, mp: (["train", str(p1), "--task", "link"] + TRAIN1,
                                                           "has no edge split; gnndist partition DATASET --edge-split"),
    "link-decoder-on-node-task": lambda t, p1, p2, mp: (["train", str(p1), "--decoder", "mlp"] + TRAIN1,
                                                        "--decoder mlp is for link prediction (--task link)"),
    "link-task-node-on-ogbl": lambda t, p1, p2, mp: (
        ["train", _link_partition(t, "ogbl-collab"), "--task", "node"] + TRAIN1,
        "--task node: ogbl-collab is a link-prediction dataset"),
    "link-split-without-valid-positives": lambda t, p1, p2, mp: (
        ["train", _link_partition(t, fractions=(0.9, 0.0, 0.1))] + TRAIN1, "the edge split has no valid positives"),
    "link-negatives-of-wrong-shape": lambda t, p1, p2, mp: (
        ["train", _link_partition(t, edit=lambda s: setattr(s, "test_neg", s.test_neg[:, :1]))] + TRAIN1,
        "test negatives of shape"),
    "link-edge-split-over-100": lambda t, p1, p2, mp: (
        ["partition", _graph_file(t), "--parts", "2", "--edge-split", "80,30,10"], "--edge-split"),
    "link-metric-node-on-link": lambda t, p1, p2, mp: (["train", _link_partition(t), "--metric", "acc"] + TRAIN1,
                                                       "--metric acc is a node metric"),
    "link-pairs-out-of-range": lambda t, p1, p2, mp: (
        ["predict", *_link_checkpoint(t)[:1], "--checkpoint", str(t / "lk"), "--what", "scores", "--pairs",
         _pairs(t, [[0, 1], [5, 10**6]]), "--out", str(t / "s.npy"), "--no-progress"],
        "node ids must lie in [0, 120)"),
    "link-pairs-not-two-columns": lambda t, p1, p2, mp: (
        ["predict", str(p1), "--checkpoint", str(t), "--what", "scores", "--pairs", _pairs(t, [[0, 1, 2]]),
         "--out", str(t / "s.npy")], "need an [n, 2] array of integer node ids"),
    "link-scores-without-pairs": lambda t, p1, p2, mp: (
        ["predict", str(p1), "--checkpoint", str(t), "--what", "scores", "--out", str(t / "s.npy")],
        "--pairs PAIRS.npy goes with --what scores"),
    "link-probs-of-a-link-model": lambda t, p1, p2, mp: (
        ["predict", *_link_checkpoint(t)[:1], "--checkpoint", str(t / "lk"), "--out", str(t / "p.npy"),
         "--no-progress"], "the checkpoint is a link predictor"),
    "link-valedges-on-node-task": lambda t, p1, p2, mp: (["train", str(p1), "--use-valedges-as-input"] + TRAIN1,
                                                         "--use-valedges-as-input is for link prediction (--task "
                                                         "link); this run is a node task"),
    "link-valedges-with-task-node": lambda t, p1, p2, mp: (
        ["train", str(p1), "--task", "node", "--use-valedges-as-input"] + TRAIN1,
        "--use-valedges-as-input is for link prediction (--task link), not --task node"),
    "link-valedges-not-stored": lambda t, p1, p2, mp: (
        ["train", _link_partition(t), "--use-valedges-as-input"] + TRAIN1,
        "stores no message graph of training + validation edges; gnndist partition DATASET --use-valedges-as-input"),
    "link-valedges-without-edge-split": lambda t, p1, p2, mp: (
        ["partition", _graph_file(t), "--parts", "2", "--use-valedges-as-input", "--out", str(t / "o")],
        "--use-valedges-as-input is for link prediction: "),
    "link-valedges-run-node-graph": lambda t, p1, p2, mp: (
        ["run", _graph_file(t), "--use-valedges-as-input"] + TRAIN1, "graph.pt has no edge split"),
    "link-valedges-without-valid-edges": lambda t, p1, p2, mp: (
        ["partition", _graph_file(t), "--parts", "2", "--edge-split", "90,0,10", "--use-valedges-as-input",
         "--out", str(t / "o")], "graph.pt has no validation edges to add"),
    "link-valedges-corrupt": lambda t, p1, p2, mp: (
        _flip_byte(Path(_link_partition(t, valedges=True)) / "valedges" / "part-0" / "col.npy")
        or ["info", str(t / "link-toy")], "checksum mismatch in"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2(case, part1, part2, tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "data"))  # the partition cache of `run` cases
    monkeypatch.delenv("GNNDIST_PARTITIONS", raising=False)
    argv, words = CASES[case](work, part1, part2, monkeypatch)
    capsys.readouterr()
    before = {p for p in work.rglob("*") if p.is_file()}
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's errors
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("gnndist") and ": error: " in lines[0] and words in lines[0], lines[0]
    new = {p for p in work.rglob("*") if p.is_file()} - before
    assert not [p for p in new if ".tmp" in p.name], new  # no partial file left behind
    if "--out" in argv:
        assert not (work / "file" / "out").exists()


def test_info_json_into_a_closed_pipe(part2):
    r = subprocess.run(f"{sys.executable} -m gnndist.cli info {part2} --json | head -c 0", shell=True,
                       capture_output=True, text=True, timeout=60)
    assert r.stderr == "", r.stderr  # head exits at once: every write meets a closed pipe


def test_info_verifies_every_file_unless_told_not_to(part2, tmp_path, capsys):
    assert main(["info", str(part2)]) == 0
    files = len(json.loads((part2 / "META.json").read_text())["sha256"])
    assert f"checksums: {files} part files match META.json" in capsys.readouterr().out
    broken = _copy(part2, tmp_path)
    (broken / "part-1" / "x.npy").write_bytes(b"")
    assert main(["info", str(broken), "--no-verify"]) == 0  # META.json alone: the report, and what it did not do
    assert "checksums: not verified (--no-verify)" in capsys.readouterr().out
    assert main(["info", str(broken), "--no-verify", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["verified"] is False
    assert main(["info", str(part2), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["verified"] is True


def test_help_lists_choices_defaults_and_positionals():
    from gnndist.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices
    for name, parser in sub.items():
        text = parser.format_help()
        for action in parser._actions:
            if action.option_strings and action.choices:
                assert all(str(c) in text for c in action.choices), (name, action.dest)
            if not action.option_strings and action.dest != "help":
                assert action.help, f"gnndist {name}: positional {action.dest} has no help"
    assert "(default: 1d)" in sub["train"].format_help()
