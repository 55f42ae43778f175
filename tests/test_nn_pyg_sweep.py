"""Every class in ``torch_geometric.nn.conv.__all__``, wrapped in ``PyGAdapter`` at P = 2, is exact or refused.

Each runnable class is built once with seeded weights, run on both ranks of a 2-part
partition (float64) and compared with the same layer on one process: the output, the
input gradient and every parameter gradient. A layer that raises ``NotDistributable`` is
*refused*; one that runs and differs is *wrong*, and fails the test. Every class is
either run here or listed in ``NOT_APPLICABLE`` with the reason, so a new PyG class
fails ``test_every_conv_class_is_classified`` until someone decides.

The table in ``docs/pyg_layers.md`` is generated from the results; regenerate it with
``GNNDIST_WRITE_DOCS=1 python -m pytest tests/test_nn_pyg_sweep.py``.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch_geometric.nn as pyg_nn
import torch_geometric.nn.conv as pyg_conv
from gnndist.datasets import synthetic
from gnndist.partition import csr_from_edge_index, partition
from torch import nn

import gnndist.nn as gnn
from gnndist.graph import DistGraph
from gnndist.testing import QUICK_PARTITION, run_distributed

F = 16  # input features
E_DIM = 3  # edge features
TOL = 1e-9  # float64 throughout: a wrong halo shows up as O(1e-3) or more
DOCS = Path(__file__).resolve().parents[1] / "docs" / "pyg_layers.md"


def _mlp(i: int, o: int) -> nn.Module:
    return nn.Sequential(nn.Linear(i, 8), nn.ReLU(), nn.Linear(8, o))


@dataclass
class Case:
    """One layer as a user would build it: ``build(ctx)`` -> conv, ``inputs(x, ctx)`` -> keyword inputs.

    ``expect`` is ``"exact"`` or a regular expression the refusal must match (the true cause).
    """

    build: object
    expect: str = "exact"
    inputs: object = None  # default: {"x": x}
    note: str = ""
    grads: bool = True  # integer outputs (WLConv) have none
    train: bool = True


def _x(x, e, ctx):
    return {"x": x}


def _x0(x, e, ctx):
    return {"x": x, "x_0": x}


def _xe(x, e, ctx):
    return {"x": x, "edge_attr": e}


def _xw(x, e, ctx):
    return {"x": x, "edge_weight": e[:, 0].abs() + 0.1}  # positive, different in each direction


CASES: dict[str, Case] = {
    "SimpleConv": Case(lambda c: pyg_nn.SimpleConv(aggr="mean", combine_root="self_loop")),
    "GCNConv": Case(lambda c: pyg_nn.GCNConv(F, 8)),
    "ChebConv": Case(lambda c: pyg_nn.ChebConv(F, 8, K=3)),
    "SAGEConv": Case(lambda c: pyg_nn.SAGEConv(F, 8)),
    "GraphConv": Case(lambda c: pyg_nn.GraphConv(F, 8)),
    "GatedGraphConv": Case(lambda c: pyg_nn.GatedGraphConv(F, num_layers=2)),
    "ResGatedGraphConv": Case(lambda c: pyg_nn.ResGatedGraphConv(F, 8)),
    "GATConv": Case(lambda c: pyg_nn.GATConv(F, 8, heads=2)),
    "GATv2Conv": Case(lambda c: pyg_nn.GATv2Conv(F, 8, heads=2)),
    "TransformerConv": Case(lambda c: pyg_nn.TransformerConv(F, 8, heads=2)),
    "AGNNConv": Case(lambda c: pyg_nn.AGNNConv()),
    "TAGConv": Case(lambda c: pyg_nn.TAGConv(F, 8, K=3)),
    "GINConv": Case(lambda c: pyg_nn.GINConv(_mlp(F, 8), train_eps=True)),
    "ARMAConv": Case(lambda c: pyg_nn.ARMAConv(F, 8, num_stacks=2, num_layers=2)),
    "SGConv": Case(lambda c: pyg_nn.SGConv(F, 8, K=2)),
    "SSGConv": Case(lambda c: pyg_nn.SSGConv(F, 8, alpha=0.1, K=2)),
    "APPNP": Case(lambda c: pyg_nn.APPNP(K=3, alpha=0.1)),
    "MFConv": Case(lambda c: pyg_nn.MFConv(F, 8, max_degree=4)),
    "DNAConv": Case(lambda c: pyg_nn.DNAConv(8, heads=2), inputs=lambda x, e, c: {"x": x.view(x.shape[0], 2, 8)}),
    "EdgeConv": Case(lambda c: pyg_nn.EdgeConv(_mlp(2 * F, 8))),
    "FeaStConv": Case(lambda c: pyg_nn.FeaStConv(F, 8, heads=2)),
    "LEConv": Case(lambda c: pyg_nn.LEConv(F, 8)),
    "PNAConv": Case(lambda c: pyg_nn.PNAConv(F, 8, ["mean", "min", "max", "std"],
                                             ["identity", "amplification", "attenuation"], c["deg_hist"])),
    "ClusterGCNConv": Case(lambda c: pyg_nn.ClusterGCNConv(F, 8, diag_lambda=0.5)),
    "GENConv": Case(lambda c: pyg_nn.GENConv(F, 8, learn_t=True, norm=None), note="with `norm=None`"),
    "GCN2Conv": Case(lambda c: pyg_nn.GCN2Conv(F, alpha=0.2, theta=0.5, layer=2), inputs=_x0),
    "PANConv": Case(lambda c: pyg_nn.PANConv(F, 8, filter_size=2), expect="powers of the adjacency.*MixHopConv"),
    "WLConv": Case(lambda c: pyg_nn.WLConv(), grads=False, expect="hash table.*depend on the partition",
                   inputs=lambda x, e, c: {"x": (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()}),
    "WLConvContinuous": Case(lambda c: pyg_nn.WLConvContinuous()),
    "FiLMConv": Case(lambda c: pyg_nn.FiLMConv(F, 8)),
    "SuperGATConv": Case(lambda c: pyg_nn.SuperGATConv(F, 8, heads=2),
                         expect="in training samples positive and negative edges.*exact in eval mode"),
    "FAConv": Case(lambda c: pyg_nn.FAConv(F, eps=0.2), inputs=_x0),
    "EGConv": Case(lambda c: pyg_nn.EGConv(F, 8, num_heads=2, num_bases=2)),
    "GeneralConv": Case(lambda c: pyg_nn.GeneralConv(F, 8, attention=True, heads=2)),
    "LGConv": Case(lambda c: pyg_nn.LGConv()),
    "GPSConv": Case(lambda c: pyg_nn.GPSConv(F, pyg_nn.GINConv(_mlp(F, F)), heads=2, norm=None),
                    expect=r"GPSConv\.attn \(MultiheadAttention\) attends over all nodes"),
    "AntiSymmetricConv": Case(lambda c: pyg_nn.AntiSymmetricConv(F, num_iters=2)),
    "DirGNNConv": Case(lambda c: pyg_nn.DirGNNConv(pyg_nn.SAGEConv(F, 8))),
    "MixHopConv": Case(lambda c: pyg_nn.MixHopConv(F, 8, powers=[0, 1, 2])),
    # edge features: the partition's edge_attr, one row per local edge
    "GINEConv": Case(lambda c: pyg_nn.GINEConv(_mlp(F, 8), train_eps=True, edge_dim=E_DIM), inputs=_xe),
    "NNConv": Case(lambda c: pyg_nn.NNConv(F, 8, nn.Linear(E_DIM, F * 8), aggr="mean"), inputs=_xe),
    "GMMConv": Case(lambda c: pyg_nn.GMMConv(F, 8, dim=E_DIM, kernel_size=2), inputs=_xe),
    "SplineConv": Case(lambda c: pyg_nn.SplineConv(F, 8, dim=E_DIM, kernel_size=3),
                       inputs=lambda x, e, c: {"x": x, "edge_attr": e.sigmoid()}),
    "CGConv": Case(lambda c: pyg_nn.CGConv(F, dim=E_DIM), inputs=_xe),
    "PDNConv": Case(lambda c: pyg_nn.PDNConv(F, 8, edge_dim=E_DIM, hidden_channels=8), inputs=_xe),
    # variants of the classes above (not counted per class)
    "GATConv[edge_dim]": Case(lambda c: pyg_nn.GATConv(F, 8, heads=2, edge_dim=E_DIM), inputs=_xe),
    "GATv2Conv[edge_dim]": Case(lambda c: pyg_nn.GATv2Conv(F, 8, heads=2, edge_dim=E_DIM), inputs=_xe),
    "TransformerConv[edge_dim]": Case(lambda c: pyg_nn.TransformerConv(F, 8, heads=2, edge_dim=E_DIM), inputs=_xe),
    "GENConv[edge_dim]": Case(lambda c: pyg_nn.GENConv(F, 8, edge_dim=E_DIM, norm=None), inputs=_xe),
    "ResGatedGraphConv[edge_dim]": Case(lambda c: pyg_nn.ResGatedGraphConv(F, 8, edge_dim=E_DIM), inputs=_xe),
    "GeneralConv[in_edge_channels]": Case(lambda c: pyg_nn.GeneralConv(F, 8, in_edge_channels=E_DIM), inputs=_xe),
    "GCNConv[edge_weight]": Case(lambda c: pyg_nn.GCNConv(F, 8), inputs=_xw),
    "ChebConv[edge_weight]": Case(lambda c: pyg_nn.ChebConv(F, 8, K=2, normalization="rw"), inputs=_xw),
    "DirGNNConv[GCNConv]": Case(lambda c: pyg_nn.DirGNNConv(pyg_nn.GCNConv(F, 8))),
    "GENConv[default]": Case(lambda c: pyg_nn.GENConv(F, 8), expect=r"GENConv\.mlp\.1 \(BatchNorm1d\) in training"),
    "SuperGATConv[eval]": Case(lambda c: pyg_nn.SuperGATConv(F, 8, heads=2), train=False),
}

NOT_APPLICABLE = {
    "MessagePassing": "the abstract base class",
    "CuGraphSAGEConv": "cuGraph (CUDA-only pylibcugraphops)",
    "CuGraphGATConv": "cuGraph (CUDA-only pylibcugraphops)",
    "CuGraphRGCNConv": "cuGraph (CUDA-only pylibcugraphops)",
    "FusedGATConv": "dgNN fused CUDA kernels",
    "RGCNConv": "typed edges (relational graphs)",
    "FastRGCNConv": "typed edges (relational graphs)",
    "RGATConv": "typed edges (relational graphs)",
    "SignedConv": "signed graphs (separate positive and negative edge sets)",
    "GravNetConv": "builds a k-NN graph over all nodes from the features (point clouds)",
    "DynamicEdgeConv": "builds a k-NN graph over all nodes from the features (point clouds)",
    "PointNetConv": "point clouds (positions)",
    "PPFConv": "point clouds (positions and normals)",
    "XConv": "point clouds (k-NN over positions)",
    "PointTransformerConv": "point clouds (positions)",
    "PointGNNConv": "point clouds (positions)",
    "HypergraphConv": "hypergraphs",
    "HGTConv": "heterogeneous graphs",
    "HEATConv": "heterogeneous graphs (node and edge types)",
    "HeteroConv": "heterogeneous graphs",
    "HANConv": "heterogeneous graphs",
    "MeshCNNConv": "triangle meshes (edge-adjacency of mesh edges)",
}


def _build(name: str, ctx: dict) -> nn.Module:
    torch.manual_seed(zlib.crc32(name.encode()))
    conv = CASES[name].build(ctx).double()
    return conv.train(CASES[name].train)


def _inputs(name: str, x: torch.Tensor, e: torch.Tensor, ctx: dict) -> dict:
    return (CASES[name].inputs or _x)(x, e, ctx)


def _err(ref: torch.Tensor, out: torch.Tensor) -> float:
    """``max|ref - out| / max|ref|``, absolute below 1e-3: a gradient that is zero analytically is rounding noise."""
    if ref.shape != out.shape:
        return float("inf")
    if not ref.numel():
        return 0.0
    ref, out = ref.detach().double(), out.detach().double()
    return (ref - out).abs().max().item() / max(ref.abs().max().item(), 1e-3)


def _flat(out) -> torch.Tensor:
    out = out[0] if isinstance(out, tuple) else out
    return out.reshape(out.shape[0], -1)


def _rank_job(grid, partdir, ctx, weights, names=None):
    """Every case (or ``names``) on this rank: refusal, error, or owned outputs and gradients."""
    graph = DistGraph.load(partdir, grid)
    owned = graph.orig_id[: graph.n_owned].long()
    results = {}
    for name in names or CASES:
        case = CASES[name]
        try:
            layer = gnn.PyGAdapter(_build(name, ctx))
            x = graph.x.double().clone().requires_grad_(case.grads)  # [n_owned, F]
            kw = _inputs(name, x, graph.edge_attr.double(), ctx)
            out = _flat(layer(graph, kw.pop("x"), **kw))
            grads = {}
            if case.grads:
                (out * weights[owned, : out.shape[1]]).sum().backward()
                grads = {n: p.grad.clone() for n, p in layer.conv.named_parameters() if p.grad is not None}
            results[name] = ("ran", {"out": out.detach(), "x_grad": x.grad, "grads": grads})
        except gnn.NotDistributable as e:
            results[name] = ("refused", str(e))
        except Exception as e:  # noqa: BLE001  reported, and fails the sweep
            results[name] = ("error", f"{type(e).__name__}: {e}")
    return {"ids": owned, "results": results}


def _reference(name: str, data, ctx, weights):
    case = CASES[name]
    try:
        conv = _build(name, ctx)
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    x = data.x.double().clone().requires_grad_(case.grads)
    kw = _inputs(name, x, data.edge_attr.double(), ctx)
    try:
        out = _flat(conv(edge_index=data.edge_index, **kw))
    except Exception as e:  # noqa: BLE001  the layer does not run here at all (a missing extension)
        return f"{type(e).__name__}: {e}"
    grads = {}
    if case.grads:
        (out * weights[:, : out.shape[1]]).sum().backward()
        grads = {n: p.grad for n, p in conv.named_parameters() if p.grad is not None}
    return {"out": out.detach(), "x_grad": x.grad, "grads": grads}


def _compare(ref: dict, per_rank: list[dict], name: str, n: int) -> float:
    """Largest relative error of output, input gradient and parameter gradients (inf on a shape mismatch)."""
    runs = [r["results"][name][1] for r in per_rank]
    out = ref["out"].new_zeros(ref["out"].shape)
    if any(run["out"].shape[1:] != out.shape[1:] for run in runs):
        return float("inf")
    for r, run in zip(per_rank, runs):
        out[r["ids"]] = run["out"]
    errs = [_err(ref["out"], out)]
    if ref["x_grad"] is not None:
        x_grad = torch.zeros_like(ref["x_grad"])
        for r, run in zip(per_rank, runs):
            x_grad[r["ids"]] = run["x_grad"]
        errs.append(_err(ref["x_grad"], x_grad))
    for k, g in ref["grads"].items():
        got = [run["grads"].get(k) for run in runs]
        errs.append(_err(g, sum(t for t in got if t is not None)) if any(t is not None for t in got) else 1.0)
    return max(errs)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    data = synthetic(60, avg_degree=5, num_classes=3, num_features=F, seed=5)  # symmetric, no duplicates
    data.edge_attr = torch.randn(data.edge_index.shape[1], E_DIM, generator=torch.Generator().manual_seed(1))
    deg = torch.from_numpy(csr_from_edge_index(data.edge_index, data.num_nodes).degree())
    ctx = {"deg_hist": torch.bincount(deg)}
    weights = torch.randn(data.num_nodes, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    root = tmp_path_factory.mktemp("sweep2")
    partition(data, 2, progress=False, **QUICK_PARTITION).save(root, dataset="synthetic", progress=False)
    per_rank = run_distributed(_rank_job, 2, str(root), ctx, weights, timeout=120)
    table = {}
    for name, case in CASES.items():
        ref = _reference(name, data, ctx, weights)
        kinds = {r["results"][name][0] for r in per_rank}
        first = per_rank[0]["results"][name]
        if kinds == {"refused"}:
            table[name] = ("refused", first[1])
        elif isinstance(ref, str):
            table[name] = ("not runnable", ref)
        elif "error" in kinds or len(kinds) > 1:
            table[name] = ("error", next(r["results"][name][1] for r in per_rank if r["results"][name][0] != "ran"))
        else:
            err = _compare(ref, per_rank, name, data.num_nodes)
            table[name] = ("exact", "") if err <= TOL else ("WRONG", f"relative error {err:.2e}")
    return table


def test_every_conv_class_is_classified():
    classes = {name for name in CASES if "[" not in name}
    assert {name.split("[")[0] for name in CASES} <= classes
    listed = classes | set(NOT_APPLICABLE)
    assert not classes & set(NOT_APPLICABLE)
    assert set(pyg_conv.__all__) == listed, (
        f"unclassified: {sorted(set(pyg_conv.__all__) - listed)}; gone: {sorted(listed - set(pyg_conv.__all__))}")


def test_no_layer_is_silently_wrong(sweep):
    wrong = {n: why for n, (kind, why) in sweep.items() if kind == "WRONG"}
    assert not wrong, f"silently wrong at P = 2: {wrong}"


def test_no_layer_errors(sweep):
    errors = {n: why for n, (kind, why) in sweep.items() if kind == "error"}
    assert not errors, f"raised something other than NotDistributable: {errors}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_outcome_is_the_expected_one(sweep, name):
    kind, why = sweep[name]
    if kind == "not runnable":
        pytest.skip(f"{name} does not run on one process here: {why}")
    expect = CASES[name].expect
    if expect == "exact":
        assert kind == "exact", f"{name}: expected exact, got {kind}: {why}"
    else:
        assert kind == "refused", f"{name}: expected a refusal matching {expect!r}, got {kind} {why}"
        assert re.search(expect, why), f"{name}: refusal does not name the cause {expect!r}: {why}"


def _markdown(sweep: dict) -> str:
    classes = [n for n in sorted(CASES) if "[" not in n]
    variants = [n for n in sorted(CASES) if "[" in n]
    counts = {k: sum(1 for n in classes if sweep[n][0] == k) for k in ("exact", "refused", "not runnable")}
    lines = [
        "# PyG layers under `PyGAdapter`",
        "",
        "Generated by `tests/test_nn_pyg_sweep.py` (`GNNDIST_WRITE_DOCS=1` rewrites it; the test fails",
        "when this page is stale). Every class in `torch_geometric.nn.conv.__all__` that applies to a",
        "homogeneous node-level graph is built as a user would (seeded weights, training mode), run on",
        "2 ranks and compared with one process: the output, the input gradient and every parameter",
        "gradient, in float64. A layer is either **exact** or **refused** with the reason; the sweep",
        "fails on any silent difference. Edge features come from the partition (`graph.edge_attr`, one",
        "row per local edge) and are passed as `PyGAdapter(conv)(graph, x, edge_attr=graph.edge_attr)`.",
        "",
        f"Of {len(classes)} classes: {counts['exact']} exact, {counts['refused']} refused, "
        f"{counts['not runnable']} not runnable in the test environment (a missing extension, so "
        f"unverified); {len(NOT_APPLICABLE)} classes do not apply.",
        "",
        "| layer | result | reason / note |",
        "|---|---|---|",
    ]
    row = lambda n: f"| `{n}` | {sweep[n][0]} | {(sweep[n][1] or CASES[n].note).replace('|', '/')} |"  # noqa: E731
    lines += [row(n) for n in classes]
    lines += ["", "## Variants", "", "| layer | result | reason / note |", "|---|---|---|"]
    lines += [row(n) for n in variants]
    lines += ["", "## Not applicable", "", "| layer | why |", "|---|---|"]
    lines += [f"| `{n}` | {why} |" for n, why in sorted(NOT_APPLICABLE.items())]
    return "\n".join(lines) + "\n"


def test_docs_table_is_current(sweep):
    text = _markdown(sweep)
    if os.environ.get("GNNDIST_WRITE_DOCS"):
        DOCS.write_text(text)
    assert DOCS.is_file() and DOCS.read_text() == text, (
        f"{DOCS} is stale: run GNNDIST_WRITE_DOCS=1 python -m pytest tests/test_nn_pyg_sweep.py")
