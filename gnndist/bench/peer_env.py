"""The mini-batch peers' own virtual environment: PyG's samplers and DGL, never gnndist's dependencies.

    env = ensure(default_venv())     # the first call installs (~25 min on 2 cores), later ones read the stamp
    subprocess.run([env.python, MINIBATCH, "job.json"])    # gnndist/bench/minibatch.py, run by the peers' python
    env.unavailable                  # {"pyg-cluster": "torch-sparse was built without METIS: ..."}: skip it

The venv is ``$GNNDIST_PEERS_VENV``, else ``~/.cache/gnndist/peers-venv``. Its steps, each one progress line,
each recorded in the stamp ``<venv>/gnndist-peers.json`` as it ends (a step recorded there, done or failed,
is not run again: delete the venv to start over; a failed ``venv`` or ``torch`` step, which every peer needs, is
not recorded but raised); pip's output goes to ``<venv>/gnndist-peers-install.log``:

1. ``venv``: ``python -m venv``.
2. ``torch``: ``torch==2.13.0``, pinned and first: unpinned, pip takes a multi-GB CUDA build.
3. ``pyg``: numpy, scipy, ``torch_geometric==2.8.*``.
4. ``metis``: a METIS with 64-bit indices for ``torch_sparse.partition`` (Cluster-GCN's ``ClusterData``).
   Debian's ``libmetis`` has 32-bit indices, which torch-sparse's METIS call cannot take; the ``pymetis``
   wheel's extension module exports METIS's 64-bit C API, so the step installs pymetis and lays beside it a
   ``libmetis.so`` link to that module and a ``metis.h`` declaring the two functions torch-sparse calls.
5. ``torch-scatter``: ``pip install --no-build-isolation torch-scatter==2.1.2`` from source against that torch
   (``MAX_JOBS``, default 2): ``import torch_sparse`` needs it.
6. ``torch-sparse``: ``pip install --no-build-isolation torch-sparse==0.6.18`` from source against that
   torch (PyPI has no wheel of it, nor any of pyg-lib), ``MAX_JOBS`` (default 2), ``WITH_METIS=1``
   linked to step 4's library; when that build fails, again without METIS (Cluster-GCN is then unavailable).
7. ``dgl``: ``pip install --no-deps dgl==2.1.0`` (its CPU wheel) and its dependencies but torchdata, which
   pulls a CUDA torch; and two it imports without declaring them: ``packaging`` (``dgl.utils``; else it falls
   back on ``setuptools.extern``, gone from recent setuptools) and ``pandas`` (``dgl.data``, which ``import dgl``
   loads through ``dgl.distributed``).
8. ``dgl-patch``: dgl 2.1.0 imports ``dgl.graphbolt`` at ``import dgl`` (through ``dgl.distributed``), and
   graphbolt needs torchdata and a C++ library built for torch <= 2.2. The patch wraps the body of the
   venv's ``dgl/graphbolt/__init__.py`` in ``try``/``except ImportError``: graphbolt is then absent
   (``dgl.graphbolt.IMPORT_ERROR`` says why) and the rest of DGL, ``NeighborSampler`` included, works.
9. ``probe``: in the venv, each peer's sampler runs on a 4-node graph; the versions and every peer that
   failed, with its reason, go into the stamp and :class:`PeerEnv`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gnndist.files import atomic_file

PEERS = ("pyg-neighbor", "pyg-cluster", "dgl-neighbor")
TORCH = "torch==2.13.0"
PYG = "torch_geometric==2.8.*"
TORCH_SCATTER = "torch-scatter==2.1.2"
TORCH_SPARSE = "torch-sparse==0.6.18"
DGL = "dgl==2.1.0"
DGL_DEPS = ("networkx", "requests", "tqdm", "psutil", "packaging", "pandas")  # see step 7
REQUIRED = ("venv", "torch")  # steps every peer needs: their failure raises
RECIPE = 1  # bump when a step changes: a venv of another recipe is reported, not reused
STAMP = "gnndist-peers.json"
LOG = "gnndist-peers-install.log"
MINIBATCH = Path(__file__).with_name("minibatch.py")  # the peers' training script, run by PeerEnv.python

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PeerEnv:
    """The installed venv: its python, the versions it has, and each peer it cannot run with the reason."""

    python: Path
    versions: dict[str, str] = field(default_factory=dict)  # torch, torch_geometric, torch_scatter, torch_sparse, dgl
    unavailable: dict[str, str] = field(default_factory=dict)  # peer name -> one line

    @property
    def available(self) -> tuple[str, ...]:
        return tuple(p for p in PEERS if p not in self.unavailable)


class PeerEnvError(RuntimeError):
    """A step every peer needs (venv, torch) failed; the message names the step and the log."""


def default_venv() -> Path:
    """``$GNNDIST_PEERS_VENV``, else ``~/.cache/gnndist/peers-venv``."""
    return Path(os.environ.get("GNNDIST_PEERS_VENV") or Path.home() / ".cache" / "gnndist" / "peers-venv")


def ensure(venv: Path | None = None, progress: Progress = print) -> PeerEnv:
    """The peers' venv at ``venv`` (default :func:`default_venv`), installed by the steps above where the stamp
    does not record them yet. Raises :class:`PeerEnvError` only when the venv or torch cannot be installed."""
    venv = Path(venv or default_venv()).expanduser().absolute()
    stamp = _read_stamp(venv)
    if stamp.get("recipe", RECIPE) != RECIPE:
        raise PeerEnvError(f"{venv} was installed by recipe {stamp['recipe']} of gnndist/bench/peer_env.py, this is "
                           f"recipe {RECIPE}: delete the folder to reinstall")
    stamp["recipe"] = RECIPE
    steps = stamp.setdefault("steps", {})
    for i, (name, step) in enumerate(STEPS, 1):
        if name in steps:
            continue
        progress(f"peers: step {i}/{len(STEPS)} {name} ...")
        t0 = time.perf_counter()
        try:
            detail = step(venv, _Pip(venv))
            steps[name] = {"ok": True, "s": round(time.perf_counter() - t0, 1), "detail": detail}
        except _StepFailed as e:
            if name in REQUIRED:
                progress(f"peers: step {i}/{len(STEPS)} {name} FAILED: {e}")
                raise PeerEnvError(f"peers venv {venv}: step {name} failed: {e} (see {venv / LOG})") from None
            steps[name] = {"ok": False, "s": round(time.perf_counter() - t0, 1), "detail": str(e)}
        _write_stamp(venv, stamp)
        s = steps[name]
        progress(f"peers: step {i}/{len(STEPS)} {name} {'done' if s['ok'] else 'FAILED'} in {s['s']:.0f} s: "
                 f"{_summary(s['detail'])}")
    return installed(venv)


def _summary(detail) -> str:
    """A step's record in one line (the probe's is a dict)."""
    if not isinstance(detail, dict):
        return str(detail)
    versions = " ".join(f"{k} {v}" for k, v in detail["versions"].items())
    missing = "; ".join(f"{p}: {why}" for p, why in detail["unavailable"].items())
    return f"{versions}; unavailable: {missing or 'none'}"


def installed(venv: Path | None = None) -> PeerEnv | None:
    """The peers' venv at ``venv`` as its stamp records it, installing nothing; None until every step has run."""
    venv = Path(venv or default_venv()).expanduser().absolute()
    steps = _read_stamp(venv).get("steps", {})
    if any(name not in steps for name, _ in STEPS) or not _python(venv).exists():
        return None
    probe = steps["probe"]["detail"] if steps["probe"]["ok"] else {"versions": {}, "unavailable": {
        p: f"probe failed: {steps['probe']['detail']}" for p in PEERS}}
    return PeerEnv(python=_python(venv), versions=dict(probe["versions"]), unavailable=dict(probe["unavailable"]))


class _StepFailed(Exception):
    """A step's one-line reason."""


class _Pip:
    """``pip install`` in the venv, its output appended to the install log; a failure raises its last error line."""

    def __init__(self, venv: Path):
        self.venv = venv

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> None:
        cmd = [str(_python(self.venv)), "-m", "pip", "install", "--disable-pip-version-check", *args]
        with open(self.venv / LOG, "a") as log:
            log.write(f"\n$ {' '.join(cmd)}\n")
            log.flush()
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}).returncode
        if rc != 0:
            raise _StepFailed(f"pip install {' '.join(args)}: exit {rc}: {_last_error(self.venv / LOG)}")


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _site_packages(venv: Path) -> Path:
    out = subprocess.run([str(_python(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def _last_error(log: Path) -> str:
    """The most telling line of pip's last output: its last ``error``/``Error`` line, else the last line."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    lines = lines[max(i for i, ln in enumerate(lines) if ln.startswith("$ ")):] if lines else []
    errors = [ln for ln in lines if "error" in ln.lower() and not ln.lower().startswith("note")]
    return (errors or lines or ["no output"])[-1][:300]


def _read_stamp(venv: Path) -> dict:
    path = venv / STAMP
    return json.loads(path.read_text()) if path.exists() else {}


def _write_stamp(venv: Path, stamp: dict) -> None:
    with atomic_file(venv / STAMP, "w") as f:
        f.write(json.dumps(stamp, indent=1) + "\n")


# 1.-9. the steps: (venv, pip) -> what the stamp records; a failure raises _StepFailed with one line

def _step_venv(venv: Path, pip: _Pip) -> str:
    venv.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if r.returncode != 0:
        raise _StepFailed(f"python -m venv: {(r.stderr.strip().splitlines() or ['exit ' + str(r.returncode)])[-1]}")
    return f"python {sys.version.split()[0]}"


def _step_torch(venv: Path, pip: _Pip) -> str:
    pip(TORCH)
    return TORCH


def _step_pyg(venv: Path, pip: _Pip) -> str:
    pip("numpy", "scipy", PYG)
    return f"numpy scipy {PYG}"


METIS_H = """\
/* The two METIS 5 functions torch-sparse calls, with 64-bit idx_t: written by gnndist/bench/peer_env.py for the
   METIS inside the pymetis wheel (libmetis.so beside this folder links to it). */
#pragma once
#include <stddef.h>
#include <stdint.h>
typedef int64_t idx_t;
typedef float real_t;
#ifdef __cplusplus
extern "C" {
#endif
int METIS_PartGraphKway(idx_t *nvtxs, idx_t *ncon, idx_t *xadj, idx_t *adjncy, idx_t *vwgt, idx_t *vsize,
                        idx_t *adjwgt, idx_t *nparts, real_t *tpwgts, real_t *ubvec, idx_t *options,
                        idx_t *edgecut, idx_t *part);
int METIS_PartGraphRecursive(idx_t *nvtxs, idx_t *ncon, idx_t *xadj, idx_t *adjncy, idx_t *vwgt, idx_t *vsize,
                             idx_t *adjwgt, idx_t *nparts, real_t *tpwgts, real_t *ubvec, idx_t *options,
                             idx_t *edgecut, idx_t *part);
#ifdef __cplusplus
}
#endif
"""


def _metis_dir(venv: Path) -> Path:
    return venv / "gnndist-metis"  # include/metis.h, lib/libmetis.so


def _step_metis(venv: Path, pip: _Pip) -> str:
    pip("pymetis")
    r = subprocess.run([str(_python(venv)), "-c", "import glob, os, pymetis; from pymetis import _internal; "
                        "print(_internal._idx_type_width()); "
                        "print(glob.glob(os.path.join(os.path.dirname(pymetis.__file__), '_internal*.so'))[0])"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise _StepFailed(f"pymetis: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    width, so = r.stdout.split()
    if width != "64":
        raise _StepFailed(f"pymetis's METIS has {width}-bit indices; torch-sparse's METIS call needs 64")
    d = _metis_dir(venv)
    (d / "include").mkdir(parents=True, exist_ok=True)
    (d / "lib").mkdir(exist_ok=True)
    (d / "include" / "metis.h").write_text(METIS_H)
    link = d / "lib" / "libmetis.so"
    link.unlink(missing_ok=True)
    link.symlink_to(so)
    return f"METIS (64-bit) of {Path(so).name}, linked at {link}"


def _step_torch_scatter(venv: Path, pip: _Pip) -> str:
    jobs = os.environ.get("MAX_JOBS", "2")
    pip("--no-build-isolation", "--no-cache-dir", "--no-binary", "torch-scatter", TORCH_SCATTER,
        env={"MAX_JOBS": jobs, "FORCE_ONLY_CPU": "1"})
    return f"{TORCH_SCATTER}, MAX_JOBS={jobs}"


def _step_torch_sparse(venv: Path, pip: _Pip) -> str:
    jobs = os.environ.get("MAX_JOBS", "2")
    env = {"MAX_JOBS": jobs, "FORCE_ONLY_CPU": "1"}
    args = ("--no-build-isolation", "--no-cache-dir", "--no-binary", "torch-sparse", TORCH_SPARSE)
    metis = _read_stamp(venv)["steps"].get("metis", {})
    why_not = metis.get("detail", "step metis did not run") if not metis.get("ok") else None
    if why_not is None:
        lib = _metis_dir(venv) / "lib"
        try:
            pip(*args, env={**env, "WITH_METIS": "1", "CPLUS_INCLUDE_PATH": str(_metis_dir(venv) / "include"),
                            "LIBRARY_PATH": str(lib), "LDFLAGS": f"-Wl,-rpath,{lib}"})
            return f"{TORCH_SPARSE} with METIS, MAX_JOBS={jobs}"
        except _StepFailed as e:
            why_not = str(e)
    pip(*args, env=env)
    return f"{TORCH_SPARSE} without METIS ({why_not}), MAX_JOBS={jobs}"


def _step_dgl(venv: Path, pip: _Pip) -> str:
    pip("--no-deps", DGL)
    pip(*DGL_DEPS)
    return f"{DGL} --no-deps; {' '.join(DGL_DEPS)}"


GRAPHBOLT_PATCH = "# gnndist peer venv: graphbolt made optional (gnndist/bench/peer_env.py, step dgl-patch)\n"


def patch_graphbolt(path: Path) -> str:
    """Step 7 on dgl 2.1.0's ``dgl/graphbolt/__init__.py`` at ``path``: its body after ``import torch`` goes under
    ``try``; an ``ImportError`` (torchdata missing) or ``FileNotFoundError`` (no graphbolt library for this torch)
    leaves ``IMPORT_ERROR`` in the module instead. Idempotent; what it did, in one line."""
    text = path.read_text()
    if GRAPHBOLT_PATCH in text:
        return f"already patched: {path}"
    head, sep, body = text.partition("import torch\n")
    if not sep or "load_graphbolt()" not in body:
        raise _StepFailed(f"{path} is not dgl 2.1.0's (no 'import torch' then 'load_graphbolt()'): not patched")
    indented = "".join("    " + ln if ln.strip() else ln for ln in body.splitlines(keepends=True))
    path.write_text(f"{head}{sep}{GRAPHBOLT_PATCH}try:\n{indented}"
                    "except (ImportError, FileNotFoundError) as _err:  # torchdata, or no library for this torch\n"
                    "    IMPORT_ERROR = repr(_err)\n")
    return f"patched {path}: its body under try/except ImportError (graphbolt optional)"


def _step_dgl_patch(venv: Path, pip: _Pip) -> str:
    path = _site_packages(venv) / "dgl" / "graphbolt" / "__init__.py"
    if not path.exists():
        raise _StepFailed(f"{path} not found")
    return patch_graphbolt(path)


PROBE = r"""
import json, torch
out = {"versions": {"torch": torch.__version__}, "unavailable": {}}
ei = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 0], [1, 0, 2, 1, 3, 2, 0, 3]])  # a 4-cycle
def peer(name, fn):
    try:
        fn()
    except Exception as e:
        out["unavailable"][name] = (type(e).__name__ + ": " + str(e)).splitlines()[0][:300]
def pyg():
    import torch_geometric, torch_scatter, torch_sparse
    out["versions"]["torch_geometric"] = torch_geometric.__version__
    out["versions"]["torch_scatter"] = torch_scatter.__version__
    out["versions"]["torch_sparse"] = torch_sparse.__version__
def pyg_neighbor():
    pyg()
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    next(iter(NeighborLoader(Data(x=torch.ones(4, 1), edge_index=ei), num_neighbors=[2, 2], batch_size=2)))
def pyg_cluster():
    pyg()
    import torch_geometric.typing as t
    if not t.WITH_TORCH_SPARSE:
        raise RuntimeError("torch_geometric does not see torch_sparse")
    torch.ops.torch_sparse.partition(torch.tensor([0, 2, 4, 6, 8]), torch.tensor([1, 3, 0, 2, 1, 3, 2, 0]), None, 2,
                                     False)
def dgl_neighbor():
    import dgl
    out["versions"]["dgl"] = dgl.__version__
    g = dgl.graph((ei[0], ei[1]))
    loader = dgl.dataloading.DataLoader(g, torch.tensor([0, 1]), dgl.dataloading.NeighborSampler([2, 2]),
                                        batch_size=2)
    next(iter(loader))
peer("pyg-neighbor", pyg_neighbor)
peer("pyg-cluster", pyg_cluster)
peer("dgl-neighbor", dgl_neighbor)
print(json.dumps(out))
"""


def _step_probe(venv: Path, pip: _Pip) -> dict:
    r = subprocess.run([str(_python(venv)), "-c", PROBE], capture_output=True, text=True)
    if r.returncode != 0:
        raise _StepFailed((r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:300])
    found = json.loads(r.stdout.strip().splitlines()[-1])
    steps = _read_stamp(venv)["steps"]
    for peers, step in ((("pyg-neighbor", "pyg-cluster"), "torch-scatter"), (("pyg-neighbor", "pyg-cluster"),
                         "torch-sparse"), (("dgl-neighbor",), "dgl")):
        if not steps.get(step, {}).get("ok"):  # the install's reason, before the import error it caused
            found["unavailable"].update({p: f"step {step} failed: {steps[step]['detail']}" for p in peers})
    sparse = steps.get("torch-sparse", {})
    if "pyg-cluster" in found["unavailable"] and " without METIS " in sparse.get("detail", ""):
        found["unavailable"]["pyg-cluster"] = f"torch-sparse was built without METIS: {sparse['detail']}"
    return found


STEPS: tuple[tuple[str, Callable[[Path, _Pip], object]], ...] = (
    ("venv", _step_venv), ("torch", _step_torch), ("pyg", _step_pyg), ("metis", _step_metis),
    ("torch-scatter", _step_torch_scatter), ("torch-sparse", _step_torch_sparse), ("dgl", _step_dgl),
    ("dgl-patch", _step_dgl_patch), ("probe", _step_probe),
)


def main(argv: list[str] | None = None) -> int:
    """``python -m gnndist.bench.peer_env [VENV]``: install (or read) the peers' venv and print it."""
    args = argv if argv is not None else sys.argv[1:]
    env = ensure(Path(args[0]) if args else None)
    print(json.dumps({"python": str(env.python), "versions": env.versions, "unavailable": env.unavailable}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
