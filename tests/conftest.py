"""Capability markers in one place: ``cuda``, ``triton``, ``slow``.

Without a GPU the Triton kernels run under the interpreter, which Triton reads when a
kernel is defined: set it here, before any test module can import a kernel.
"""

import os
import sys
from pathlib import Path

import pytest

# The suite runs as users run: the checkout's root is not on sys.path, here or in any process the tests start,
# so the top-level folders partition/, kernels/, datasets/ import only as gnndist.partition, ... (as installed).
# ``make test`` runs the pytest console script (its path starts at .venv/bin; pytest adds tests/ itself, so that
# spawned ranks can import the test modules' functions); PYTHONSAFEPATH keeps ``python -m``/``-c`` in the processes
# the tests start from adding their working directory (the checkout, when the suite runs from it).
# Every process the suite starts (about 160: ranks, launched jobs, CLI runs) imports gnndist's 100-odd modules; with
# PYTHONDONTWRITEBYTECODE set (some machines' images set it) each compiled them from source again, 0.3 s of CPU a
# process. The suite writes its bytecode (into __pycache__/, which git ignores) so that only the first compiles.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

CHECKOUT = Path(__file__).resolve().parents[1]
_on_path = [p for p in sys.path if Path(p or ".").resolve() == CHECKOUT]
if _on_path:
    pytest.exit(f"the checkout {CHECKOUT} is on sys.path ({_on_path}): run the suite as `make test` does "
                f"(.venv/bin/pytest tests, or python -P -m pytest tests), not `python -m pytest`", returncode=2)
os.environ["PYTHONSAFEPATH"] = "1"

from gnndist.testing import HAS_CUDA, HAS_TRITON, QUICK_PARTITION  # noqa: E402

if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"
# every multi-rank run the tests start (the CLI's ranks too) compares its collectives across ranks, except in the
# modules that set CHECK_COLLECTIVES = False (the _collective_check fixture below)
os.environ.setdefault("GNNDIST_CHECK_COLLECTIVES", "1")
# the suite never reaches the internet: a registered dataset missing from a test's root is a one-line refusal;
# tests/test_download.py lifts it and serves the sources on 127.0.0.1 (GNNDIST_MIRROR)
os.environ.setdefault("GNNDIST_OFFLINE", "1")


# The files that take longest (worker-seconds in `make test`'s run of 2026-12-07 on 2 cores: 60 .. 8), run first: `make
# test` runs the suite on 2 workers (pytest-xdist, --dist loadfile --no-loadscope-reorder: without the last flag
# xdist orders the files by their number of tests) that take files in this order, so the long ones overlap instead of
# one of them running alone at the end. A file not named keeps its place after them.
LONGEST_FIRST = ("test_installed.py", "test_reliability.py", "test_deep_models.py", "test_bench.py",
                 "test_degenerate_parts.py", "test_kernels_training.py", "test_link.py", "test_precision.py",
                 "test_download.py", "test_nn_pyg_sweep.py", "test_cli_torchrun.py", "test_nn_layers.py",
                 "test_cli_train.py", "test_cluster.py", "test_kernels_spmm.py", "test_bad_inputs.py",
                 "test_agreement.py", "test_kernels_sddmm.py", "test_partition_balance.py", "test_strategies.py",
                 "test_kernels_measured.py", "test_docs_site.py", "test_metrics.py", "test_tta.py",
                 "test_kernels_compile.py", "test_link_cli.py", "test_sparse_rows.py", "test_rank_imports.py")


def pytest_collection_modifyitems(config, items):
    order = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: order.get(item.path.name, len(order)))  # stable: each file's tests keep their order
    skip_cuda = pytest.mark.skip(reason="needs a CUDA device")
    skip_triton = pytest.mark.skip(reason="needs the triton package")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_cuda)
        if "triton" in item.keywords and not HAS_TRITON:
            item.add_marker(skip_triton)


@pytest.fixture(scope="module", autouse=True)
def _collective_check(request):
    """``CHECK_COLLECTIVES = False`` in a module: its ranks run without ``GNNDIST_CHECK_COLLECTIVES``.

    The check adds a synchronising all-gather before every collective; in the modules whose runs are long loops of
    small collectives compared number for number with one process (test_link, test_precision, test_deep_models,
    ...) it took 25-50 % of their time (2026-12-07, 2 cores: 85 s of the suite's 725 worker-seconds). A desync
    there still fails: as a hang ended by the run's timeout, or as numbers that differ from one process's. What the
    check itself says is tested with it on (test_agreement, test_degenerate_parts), and every other module keeps it.
    """
    with pytest.MonkeyPatch.context() as mp:
        if not getattr(request.module, "CHECK_COLLECTIVES", True):
            mp.setenv("GNNDIST_CHECK_COLLECTIVES", "0")
        yield


@pytest.fixture(scope="module")
def part2(tmp_path_factory):
    """A 2-part partition of a 300-node synthetic graph (the CLI tests' default)."""
    from gnndist.datasets import synthetic  # imported here: TRITON_INTERPRET must be set first
    from gnndist.partition import partition

    d = tmp_path_factory.mktemp("p2")
    data = synthetic(300, avg_degree=6, num_classes=3, num_features=8, seed=1)
    partition(data, 2, **QUICK_PARTITION).save(d, dataset="toy")
    return d


@pytest.fixture(scope="module")
def part1(tmp_path_factory):
    """A 1-part partition of a 200-node synthetic graph."""
    from gnndist.datasets import synthetic
    from gnndist.partition import partition

    d = tmp_path_factory.mktemp("p1")
    partition(synthetic(200, avg_degree=5, num_classes=3, num_features=6, seed=2), 1).save(d, dataset="toy")
    return d


@pytest.fixture
def pooled_ranks():
    """``--ranks N`` ranks started on the suite's pooled processes (:func:`gnndist.testing.pooled_launches`).

    For tests of what the ranks compute; the launcher's own behaviour (the elastic agent,
    restarts, signals, a rank that dies) is tested on real launches (test_reliability,
    test_cli_torchrun, test_cli_train, test_api). Runs with restarts still launch for real.
    """
    from gnndist.testing import pooled_launches

    with pooled_launches():
        yield
