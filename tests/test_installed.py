"""gnndist as users have it: installed from a wheel, run from another directory.

What works only from the checkout is a defect: a bare ``import partition`` (the folder is
``gnndist.partition`` once installed), a data file found beside the checkout, a module missing
from the wheel. The suite itself runs without the checkout on ``sys.path`` (conftest.py); here
its spawned ranks are checked for the same, every source file is checked for bare imports, and
the README's commands run on Cora from a wheel installed into a temporary folder.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from gnndist.testing import run_distributed

CHECKOUT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("partition", "kernels", "datasets")  # folders at the top that install as gnndist.<name>
PACKAGE_DIRS = {"gnndist": "gnndist", **{name: f"gnndist/{name}" for name in SUBPACKAGES}}  # checkout -> wheel
SOURCE_DIRS = ("gnndist", *SUBPACKAGES, "tests", "benchmarks", "scripts", "examples")


def _bare_imports(path: Path) -> list[str]:
    """``file:line name`` of every import of a subpackage by its bare name (``import partition``,
    ``from kernels.spmm import ...``, ``importlib.import_module("datasets")``) in one Python file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__", "find_spec") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        found += [f"{path.relative_to(CHECKOUT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in SUBPACKAGES]
    return found


def test_no_subpackage_is_imported_by_its_bare_name():
    """``gnndist.partition``, never ``partition``: the library, tests, benchmarks, scripts and examples."""
    files = [p for d in SOURCE_DIRS for p in sorted((CHECKOUT / d).rglob("*.py")) if "results" not in p.parts]
    assert len(files) > 100  # the walk found the tree
    bad = [hit for p in files for hit in _bare_imports(p) if p.name != "test_installed.py"]
    assert not bad, f"bare imports (install as gnndist.<name>): {bad}"
    shell = [f"{p.relative_to(CHECKOUT)}" for d in ("scripts", "benchmarks", ".ci") if (CHECKOUT / d).exists()
             for p in (CHECKOUT / d).rglob("*.sh")
             if any(f"-m {name}" in line or f"import {name}" in line for name in SUBPACKAGES
                    for line in p.read_text().splitlines())]
    assert not shell, f"shell scripts that run a subpackage by its bare name: {shell}"


def test_the_static_check_finds_a_bare_import(tmp_path):
    probe = CHECKOUT / "tests" / f"_probe_{os.getpid()}.py"  # inside the checkout: relative_to needs it
    probe.write_text("import os\nfrom partition.progress import Stages\nimport gnndist.kernels\n"
                     "importlib.import_module('datasets.npz')\n")
    try:
        assert [h.split(" ", 1)[1] for h in _bare_imports(probe)] == ["partition.progress", "datasets.npz"]
    finally:
        probe.unlink()


def _where(grid):
    """What a rank imports from: its sys.path, whether a bare ``partition`` imports, where gnndist.partition is."""
    import gnndist.partition

    return {"path": list(sys.path), "bare": importlib.util.find_spec("partition") is not None,
            "partition": gnndist.partition.__file__, "safe": os.environ.get("PYTHONSAFEPATH")}


def _assert_outside(where: dict) -> None:
    roots = [p for p in where["path"] if Path(p or ".").resolve() == CHECKOUT]
    assert not roots, f"the checkout is on a rank's sys.path: {where['path']}"
    assert not where["bare"], "a bare `import partition` works on a rank"


def test_ranks_do_not_see_the_checkout():
    """The suite's pooled ranks and a real launch (the elastic agent's spawned ranks) import as users do."""
    import gnndist

    for where in (*run_distributed(_where, 2), gnndist.launch(_where, ranks=2, timeout=60)):
        _assert_outside(where)
        assert where["safe"] == "1"  # processes the ranks start add no working directory to their path


# ---------------------------------------------------------------------------------------- the wheel
def _build_wheel(dest: Path) -> Path:
    """The wheel a user installs, built from a copy of the package's sources (nothing written into the checkout)."""
    src = dest / "src"
    src.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(CHECKOUT / name, src / name)
    for d in PACKAGE_DIRS:
        shutil.copytree(CHECKOUT / d, src / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "-w", str(dest / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (dest / "dist").glob("gnndist-*.whl")
    return wheel


def _tracked_sources() -> set[str]:
    """Every file of the package in the checkout, by the name it has in the wheel."""
    out = set()
    for d, inside in PACKAGE_DIRS.items():
        for p in (CHECKOUT / d).rglob("*"):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc" and not (
                    d == "gnndist" and p.relative_to(CHECKOUT / d).parts[0] in SUBPACKAGES):
                out.add(f"{inside}/{p.relative_to(CHECKOUT / d).as_posix()}")
    return out


# The README's commands on Cora, as a user types them (cwd: a scratch folder outside the checkout), in phases of
# two lanes that run side by side (a lane's commands in order): what a later phase reads, an earlier one wrote.
# predict: probs at 1 rank and class at 2 (the same classes: dataset order at any P). Every --what at every P, against
# PyG, is tests/test_predict.py's (in-process); here each command runs once as installed (one launch: ~2 s of imports)
def _predict(data: str, ranks: str, what: str) -> list[str]:
    return ["predict", data, "--checkpoint", "ck", "--out", f"{data}-{what}.npy", "--ranks", ranks, "--what", what,
            "--no-progress"]


SMOKE = [
    ([["partition", "cora", "--parts", "2", "--method", "metis", "--balance", "nodes", "--out", "p2"],
      ["train", "p2", "--ranks", "2", "--epochs", "5", "--checkpoint", "ck", "--no-progress", "--json",
       "--log-file", "log.jsonl"]],
     [["simulate", "cora", "--parts", "4"]]),
    ([_predict("cora", "1", "probs"), ["export", "--checkpoint", "ck", "--out", "gcn_pyg.pt", "--format", "pyg"],
      ["run", "cora", "--ranks", "1", "--epochs", "3", "--no-progress"]],
     [["info", "p2"], _predict("p2", "2", "class"),
      ["bench", "peer", "--quick", "--dataset", "cora", "--out", "bench"]]),
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """gnndist from its wheel, installed into a temporary target (the venv's torch and the rest reused)."""
    base = tmp_path_factory.mktemp("installed")
    wheel = _build_wheel(base)
    site = base / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile",
                        "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    work = base / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "GNNDIST_DATA": str(base / "data"),
           "GNNDIST_PARTITIONS": str(base / "partitions")}
    for name in ("GNNDIST_CHECK_COLLECTIVES", "TRITON_INTERPRET", "PYTHONSAFEPATH"):  # the suite's, not a user's
        env.pop(name, None)
    return wheel, site, work, env


def test_the_wheel_holds_every_file_of_the_package(installed):
    wheel = installed[0]
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_tracked_sources() - names)
    assert not missing, f"in the checkout, not in the wheel (setup.cfg packages / package_data): {missing}"


SUMMARY_KEYS = ("train_acc", "val_acc", "test_acc", "best_epoch", "epochs", "epoch_time_s", "comm_bytes_per_epoch",
                "nproc", "strategy")


def _check_summary_and_log(summary: dict, log: Path) -> None:
    """``--json``'s last line and ``--log-file``'s rows of a 5-epoch 2-rank run: every key, bytes that add up."""
    assert all(key in summary for key in SUMMARY_KEYS), summary
    assert summary["nproc"] == 2 and summary["epochs"] == 5 and summary["strategy"] == "1d"
    per_layer = summary["comm_bytes_per_layer"]
    assert {"layer0", "layer1", "grad_allreduce"} <= set(per_layer)
    assert per_layer["layer0"]["fwd_sent"] == per_layer["layer0"]["bwd_received"] > 0
    assert summary["comm_bytes_per_epoch"] == sum(v["fwd_sent"] + v["bwd_sent"] for v in per_layer.values()) > 0
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [row["epoch"] for row in rows] == list(range(5))
    assert all(key in rows[0] for key in ("epoch", "loss", "train_acc", "val_acc", "test_acc", "time_s", "comm_bytes"))


def test_readme_commands_run_from_the_installed_wheel(installed):
    """Each command exits 0 from a folder outside the checkout, with the wheel's gnndist first on the path."""
    _, site, work, env = installed
    where = subprocess.run([sys.executable, "-c", "import json, gnndist, gnndist.partition, gnndist.kernels, "
                            "gnndist.datasets, importlib.util as u; print(json.dumps([m.__file__ for m in (gnndist, "
                            "gnndist.partition, gnndist.kernels, gnndist.datasets)] + [u.find_spec('partition') "
                            "is None]))"], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    *files, no_bare = json.loads(where.stdout)
    assert no_bare and all(Path(f).resolve().is_relative_to(site) for f in files), files
    exe = site / "bin" / "gnndist"

    def lane(commands: list[list[str]]) -> list[tuple[str, float, int, str]]:
        done = []
        for argv in commands:
            t = time.perf_counter()
            r = subprocess.run([str(exe), *argv], cwd=work, env=env, capture_output=True, text=True, timeout=300)
            done.append((" ".join(argv), round(time.perf_counter() - t, 1), r.returncode, r.stderr))
            outputs[" ".join(argv[:2])] = r.stdout
            if r.returncode:
                break
        return done

    from concurrent.futures import ThreadPoolExecutor

    times, outputs = {}, {}
    with ThreadPoolExecutor(2) as pool:
        for phase in SMOKE:
            for cmd, seconds, code, err in [c for lane_done in pool.map(lane, phase) for c in lane_done]:
                times[cmd] = seconds
                assert code == 0, f"gnndist {cmd} exited {code}:\n{err[-3000:]}"
                assert "Traceback" not in err, err[-3000:]
    import numpy as np

    classes = np.load(work / "p2-class.npy").reshape(-1)  # [N, 1]
    probs = np.load(work / "cora-probs.npy")
    assert classes.shape == (2708,) and probs.shape[0] == 2708 and np.allclose(probs.sum(1), 1, atol=1e-4)
    assert (work / "gcn_pyg.pt").exists() and (work / "bench" / "peer.csv").exists()
    assert np.array_equal(probs.argmax(1), classes)  # 1 rank and 2 ranks: the same classes, dataset order
    _check_summary_and_log(json.loads(outputs["train p2"].strip().splitlines()[-1]), work / "log.jsonl")
    assert list(Path(env["GNNDIST_PARTITIONS"]).glob("cora-*p1-auto-vol-s0/META.json"))  # cached, --method auto
    print("smoke command seconds:", times)
