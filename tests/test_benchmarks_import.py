"""Every script in ``benchmarks/`` imports against the installed gnndist (a moved module breaks it here, not on a
user)."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_benchmark_script_imports(script, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import their siblings (pyg_reference) as they do when run
    monkeypatch.setattr(sys, "argv", [script])
    spec = importlib.util.spec_from_file_location(f"benchmarks_{Path(script).stem}", BENCH / script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # a dataclass looks its module up there
    spec.loader.exec_module(module)  # their work runs under __main__ only
    assert capsys.readouterr().out == "", f"{script} does work at import"
