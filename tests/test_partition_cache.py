"""The partition cache: where it lies (never in a ``--root`` dataset folder), keys that tell datasets of one
name and partitions for different models apart, and versions: a partition another gnndist made is rebuilt."""

import json
import os
import shutil

import pytest
from gnndist.datasets.planetoid import bundled_dir
from gnndist.partition import read_meta
from gnndist.partition.format import ALGORITHM_VERSION, FORMAT_VERSION, versions_of

from gnndist.cli import main
from gnndist.config import DataConfig, ModelConfig, PartitionConfig
from gnndist.parts.cache import ensure_partition, make_partition, partition_cache, partition_dir

CORA_F, CORA_CLASSES = 1433, 7


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """``$GNNDIST_DATA`` = a fresh folder (the data root, whose partitions/ is the cache)."""
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "gnndist"))
    monkeypatch.delenv("GNNDIST_PARTITIONS", raising=False)
    return tmp_path / "gnndist" / "partitions"


def _files(folder):
    return {(p.relative_to(folder), p.stat().st_mtime_ns) for p in folder.rglob("*")}


def test_cache_is_in_the_data_root_and_nothing_is_written_under_root(tmp_path, cache, capsys):
    root = tmp_path / "shared"  # someone else's folder of data, holding cora/ind.cora.*
    shutil.copytree(bundled_dir("cora"), root / "cora")
    before = _files(root)
    assert main(["partition", "cora", "--root", str(root), "--parts", "2", "--balance", "nodes", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["dir"]
    expected = partition_dir("cora", PartitionConfig(parts=2, balance="nodes"), DataConfig(root=str(root)))
    assert out == str(expected) and expected.parent == cache == partition_cache()
    assert expected.name.startswith("cora-") and expected.name.endswith("-p2-auto-vol-s0-bnodes")
    assert read_meta(expected)["parts"] == 2
    assert _files(root) == before


def test_keys_tell_roots_and_paths_apart(tmp_path, cache, monkeypatch):
    key = lambda dataset, root=None: partition_dir(dataset, PartitionConfig(parts=2), DataConfig(root=root)).name  # noqa: E731
    assert key("cora") == key("cora", str(cache.parent)) == "cora-p2-auto-vol-s0"  # the data root: no hash
    a, b = key("cora", str(tmp_path / "a")), key("cora", str(tmp_path / "b"))
    assert a != b and a.startswith("cora-") and a.endswith("-p2-auto-vol-s0")
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "g.pt").touch()
    assert key(str(tmp_path / "a" / "g.pt")) != key(str(tmp_path / "b" / "g.pt"))
    monkeypatch.setenv("GNNDIST_PARTITIONS", str(tmp_path / "parts"))  # a cache shared by several data roots
    assert partition_cache() == tmp_path / "parts"
    assert partition_dir("cora", PartitionConfig(), DataConfig()).parent == tmp_path / "parts"
    assert key("cora") != "cora-p2-auto-vol-s0"


def test_a_read_only_cache_fails_before_loading(cache, monkeypatch, capsys):
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert main(["partition", "cora", "--parts", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "read-only" in err[0] and "GNNDIST_PARTITIONS" in err[0], err


def test_make_partition_models_the_given_model(tmp_path):
    part, model = PartitionConfig(parts=2, balance="nodes"), ModelConfig(hidden=64, layers=3)
    _, report = make_partition("cora", part, DataConfig(), str(tmp_path / "p"), model)
    assert report["cost_model"]["widths"] == [CORA_F, 64, 64, CORA_CLASSES]
    default = partition_dir("cora", PartitionConfig(parts=2), DataConfig()).name
    assert default == "cora-p2-auto-vol-s0"
    assert partition_dir("cora", part, DataConfig(), model).name == "cora-p2-auto-vol-s0-bnodes-h64x3"
    assert partition_dir("cora", PartitionConfig(parts=2), DataConfig(), ModelConfig(hidden=64)).name != default


def test_partition_flags_and_run_pass_the_model(cache, capsys):
    assert main(["partition", "cora", "--parts", "2", "--balance", "nodes", "--hidden", "32", "--layers", "1",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["cost_model"]["widths"] == [CORA_F, CORA_CLASSES]
    assert report["dir"] == str(cache / "cora-p2-auto-vol-s0-bnodes-h32x1")
    assert main(["run", "synthetic-200", "--balance", "nodes", "--hidden", "8", "--layers", "3", "--epochs", "1",
                 "--no-progress", "--json"]) == 0
    meta = read_meta(cache / "synthetic-200-p1-auto-vol-s0-bnodes-h8x3")
    assert meta["report"]["cost_model"]["widths"] == [meta["F"], 8, 8, meta["classes"]]


def test_bad_model_flags_name_the_flag(cache, capsys):
    for flags, words in ((["--hidden", "0"], "--hidden must be >= 1"), (["--layers", "0"], "--layers must be >= 1")):
        assert main(["partition", "cora", "--parts", "2"] + flags) == 2
        assert words in capsys.readouterr().err


def test_train_notes_a_partition_chosen_for_another_model(tmp_path, capsys):
    from gnndist.cli import build_parser
    from gnndist.presets import from_args as train_config_from_args
    from gnndist.train import say_modelled_widths

    out, _ = make_partition("cora", PartitionConfig(parts=2, balance="nodes"), DataConfig(), str(tmp_path / "p"))
    cfg = lambda *argv: train_config_from_args(build_parser().parse_args(["train", str(out), *argv]))  # noqa: E731
    say_modelled_widths(out, cfg("--hidden", "16"))
    assert capsys.readouterr().out == ""
    say_modelled_widths(out, cfg("--hidden", "64", "--layers", "3"))
    said = capsys.readouterr().out
    assert "chosen for a model of widths 1433-16-7, training 1433-64-64-7" in said and said.count("\n") == 1
    say_modelled_widths(tmp_path / "nothing", cfg())  # launch reports a bad directory, not this
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------------- versions
def _edit_meta(folder, **fields):
    """Set (or, given None, delete) fields of ``folder``'s META.json: a partition as another gnndist wrote it.
    Returns the META.json written."""
    meta = json.loads((folder / "META.json").read_text())
    for key, value in fields.items():
        if value is None:
            del meta[key]
        else:
            meta[key] = value
    (folder / "META.json").write_text(json.dumps(meta))
    return meta


@pytest.mark.parametrize("made", [dict(algorithm_version=None), dict(algorithm_version=ALGORITHM_VERSION + 1),
                                  dict(format_version=None)], ids=["no-algorithm", "newer-algorithm", "no-format"])
def test_a_cached_partition_of_other_versions_is_rebuilt_in_one_line(cache, made):
    part, said = PartitionConfig(parts=2, method="metis", balance="nodes"), []
    target = ensure_partition("synthetic-200", part, DataConfig(), say=said.append)
    assert versions_of(read_meta(target)) == (FORMAT_VERSION, ALGORITHM_VERSION)
    said.clear()
    assert ensure_partition("synthetic-200", part, DataConfig(), say=said.append) == target
    assert said == [f"using the cached partition {target}"]  # same versions: reused

    old = versions_of(_edit_meta(target, **made))
    said.clear()
    assert ensure_partition("synthetic-200", part, DataConfig(), say=said.append) == target
    assert [s for s in said if s.startswith("rebuilding")] == [
        f"rebuilding {target}: made by partition format {old[0]} / algorithm {old[1]}, this gnndist writes "
        f"{FORMAT_VERSION} / {ALGORITHM_VERSION}"]
    assert f"writing the parts to {target}" in said
    assert versions_of(read_meta(target)) == (FORMAT_VERSION, ALGORITHM_VERSION)


def test_run_says_why_it_rebuilds(cache, capsys):
    flags = ["--balance", "nodes", "--method", "metis", "--epochs", "1", "--no-progress"]
    assert main(["run", "synthetic-200", *flags]) == 0
    target = cache / "synthetic-200-p1-metis-vol-s0-bnodes"
    _edit_meta(target, algorithm_version=None)
    capsys.readouterr()
    assert main(["run", "synthetic-200", *flags]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [s for s in out if "rebuilding" in s] == [
        f"gnndist: rebuilding {target}: made by partition format {FORMAT_VERSION} / algorithm 0, this gnndist "
        f"writes {FORMAT_VERSION} / {ALGORITHM_VERSION}"]


def test_info_shows_the_versions_and_train_reads_an_older_algorithm(tmp_path, capsys):
    out, _ = make_partition("synthetic-200", PartitionConfig(parts=1, method="metis", balance="nodes"), DataConfig(),
                            str(tmp_path / "p"))
    assert main(["info", str(out)]) == 0
    assert f"made by partition format {FORMAT_VERSION} / algorithm {ALGORITHM_VERSION} (this gnndist's)" \
        in capsys.readouterr().out.splitlines()
    assert main(["info", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (report["format_version"], report["algorithm_version"]) == (FORMAT_VERSION, ALGORITHM_VERSION)

    _edit_meta(out, algorithm_version=None)  # made before algorithm versions: readable, and exact as any partition
    assert main(["info", str(out)]) == 0
    assert (f"made by partition format {FORMAT_VERSION} / algorithm 0, this gnndist writes {FORMAT_VERSION} / "
            f"{ALGORITHM_VERSION} (train reads it as it is; the cache rebuilds it)") in capsys.readouterr().out
    assert main(["train", str(out), "--epochs", "1", "--no-progress"]) == 0

    _edit_meta(out, format_version=None)  # another format: refused in one line that says how to make it again
    capsys.readouterr()
    assert main(["train", str(out), "--epochs", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "partition format version 0 is not supported" in err[0], err
    assert err[0].endswith(f"made by an older gnndist: re-make it with `gnndist partition synthetic-200 --parts 1 "
                           f"--method metis --out {out}`"), err


NARROWED = ("halo_gid", "send_idx", "orig_id", "degree", "rel_rowptr", "rel_col")  # int32 since format 2


def _as_format_1(folder, to):
    """``folder`` as format 1 wrote it (its id arrays int64, their sha256 in META.json) at ``to``."""
    import hashlib

    import numpy as np

    shutil.copytree(folder, to)
    meta = json.loads((to / "META.json").read_text())
    for rel in [r for r in meta["sha256"] if r.split("/")[-1].removesuffix(".npy") in NARROWED]:
        arr = np.load(to / rel)
        assert arr.dtype == np.int32, rel  # format 2: int32 below 2^31
        np.save(to / rel, arr.astype(np.int64))
        meta["sha256"][rel] = hashlib.sha256((to / rel).read_bytes()).hexdigest()
    meta["format_version"] = 1
    (to / "META.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("dataset,flags", [("synthetic-200", []), ("synthetic-mag-200", ["--model", "rgcn"])],
                         ids=["homogeneous", "typed"])
def test_a_format_1_partition_with_int64_ids_trains_to_the_same_numbers(tmp_path, capsys, dataset, flags,
                                                                      pooled_ranks):
    """Format 2 stores every id array in int32 (issue 49); a format 1 partition (the same values in int64) is read
    as it is, never misread: the same loss and accuracies, to the last digit, at 2 ranks."""
    new, _ = make_partition(dataset, PartitionConfig(parts=2, method="metis", balance="nodes"), DataConfig(),
                            str(tmp_path / "new"))
    _as_format_1(new, tmp_path / "old")
    assert versions_of(read_meta(tmp_path / "old"))[0] == 1
    runs = []
    for folder in (new, tmp_path / "old"):
        capsys.readouterr()
        assert main(["train", str(folder), "--ranks", "2", "--epochs", "3", "--no-progress", "--json", *flags]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        runs.append({k: out[k] for k in ("final_loss", "train_acc", "val_acc", "test_acc")})
    assert runs[0] == runs[1]
