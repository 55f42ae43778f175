"""Partitioner backends: valid, balanced, deterministic assignments; refusals in one line."""

import builtins

import numpy as np
import pytest
from gnndist.datasets import synthetic
from gnndist.partition import csr_from_edge_index, partition
from gnndist.partition.backends import BACKENDS, Request, backend, write_parhip
from gnndist.partition.book import comm_volume

from gnndist.cli import main
from gnndist.errors import UserError


@pytest.fixture(scope="module")
def graph():
    data = synthetic(600, avg_degree=8, num_classes=4, num_features=4, seed=2)
    return data, csr_from_edge_index(data.edge_index, 600)


@pytest.mark.parametrize("name", list(BACKENDS))
@pytest.mark.parametrize("weighted", [False, True], ids=["ones", "degree"])
def test_backend_assignment_is_valid_balanced_and_deterministic(graph, name, weighted):
    _, csr = graph
    parts, tol = 4, 1.05
    w = csr.degree()[:, None] if weighted else np.ones((csr.num_nodes, 1), dtype=np.int64)
    req = Request(parts, w, np.array([tol]), seed=3)
    a = BACKENDS[name].assign(csr, req)
    assert a.dtype == np.int64 and a.shape == (csr.num_nodes,) and a.min() >= 0 and a.max() < parts
    assert np.array_equal(a, BACKENDS[name].assign(csr, req))  # same seed, same parts
    load = np.bincount(a, weights=w[:, 0], minlength=parts)
    if name != "random":  # the baseline deals nodes round-robin; the others meet the tolerance they are given
        assert load.max() <= tol * w.sum() / parts + w.max()
        assert comm_volume(csr, a, parts) < 0.7 * comm_volume(csr, BACKENDS["random"].assign(csr, req), parts)
    assert BACKENDS[name].library(csr.nnz).split()[0] in ("pymetis", "libmetis.so.5", "kaminpar", "mtkahypar",
                                                           "gnndist")


@pytest.mark.parametrize("name", ["kaminpar", "hypergraph"])
def test_one_constraint_backends_refuse_several_naming_metis(graph, name):
    data, csr = graph
    two = Request(4, np.ones((csr.num_nodes, 2), dtype=np.int64), np.array([1.03, 1.03]))
    why = BACKENDS[name].unsupported(csr, two)
    assert why and "\n" not in why and "--method metis" in why
    with pytest.raises(UserError, match="--method metis"):
        partition(data, 4, method=name, balance="nodes,edges", progress=False)
    r = partition(data, 4, method="auto", balance="nodes,edges", progress=False).report  # auto skips them
    assert r["backend"] == "metis" and set(r["skipped"]) == {"kaminpar", "hypergraph"}


def test_cli_refusal_is_one_line(capsys):
    assert main(["partition", "cora", "--parts", "2", "--method", "kaminpar", "--balance", "nodes,train"]) == 2
    err = capsys.readouterr().err
    assert "--method metis" in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_missing_package_says_how_to_install_it(graph, monkeypatch):
    data, csr = graph
    real = builtins.__import__

    def no_kaminpar(name, *args, **kw):
        if name == "kaminpar":
            raise ImportError("No module named 'kaminpar'")
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_kaminpar)
    why = backend("kaminpar").unsupported(csr, Request(4))
    assert "pip install kaminpar" in why and "\n" not in why
    with pytest.raises(UserError, match="pip install kaminpar"):
        partition(data, 4, method="kaminpar", progress=False)
    assert partition(data, 4, progress=False).report["skipped"]["kaminpar"] == why  # auto goes on without it


def test_auto_considers_every_backend_and_hands_large_graphs_to_kaminpar(graph, monkeypatch):
    from gnndist.partition import balance

    data, _ = graph
    r = partition(data, 4, progress=False).report
    tried = {c["method"] for c in r["auto"]["candidates"]}
    assert tried == {"metis", "kaminpar", "hypergraph"} and r["backend"] in tried
    best = min(c["modelled_epoch_s"] for c in r["auto"]["candidates"])
    assert r["modelled_epoch_s"] == pytest.approx(best, rel=1e-12)
    monkeypatch.setattr(balance, "MEDIUM", 100)
    monkeypatch.setattr(balance, "LARGE", 200)
    big = partition(data, 4, progress=False).report
    assert big["backend"] == "kaminpar" and [c["method"] for c in big["auto"]["candidates"]] == ["kaminpar"]
    assert big["library"].startswith("kaminpar ") and "metis_sampled_entries" not in big


@pytest.mark.parametrize("weights", [None, "degree"])
def test_parhip_file_holds_the_graph(graph, tmp_path, weights):
    import kaminpar

    _, csr = graph
    w = csr.degree() if weights else None
    path = tmp_path / "g.parhip"
    with open(path, "wb") as f:
        write_parhip(f, csr, w, chunk=97)  # chunks that do not divide the arrays
    g = kaminpar.load_graph(str(path), kaminpar.GraphFileFormat.PARHIP)
    assert (g.n(), g.m()) == (csr.num_nodes, csr.nnz // 2) or (g.n(), g.m()) == (csr.num_nodes, csr.nnz)
    for v in (0, 17, csr.num_nodes - 1):
        lo, hi = csr.rowptr[v], csr.rowptr[v + 1]
        assert sorted(u for u, _ in g.neighbors(v)) == sorted(csr.col[lo:hi].tolist())
        assert g.node_weight(v) == (w[v] if weights else 1)
