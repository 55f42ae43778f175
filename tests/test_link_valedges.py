"""``--use-valedges-as-input`` (OGB collab's test-time protocol): the test split is scored over the message graph of
training + validation edges, exactly at any P; that graph holds those edges and no test edge; the training graph,
the train and validation metrics stay as they were.

Ranks are spawned once per world size; each rank trains every case and returns what the parent compares.
"""

import contextlib
import json

import pytest
import torch

from gnndist.cli import main
from gnndist.testing import QUICK_PARTITION, assert_close, run_distributed

CHECK_COLLECTIVES = False  # long loops compared with one process: tests/conftest.py's _collective_check

EPOCHS = 4
CASES = [("gcn", "dot"), ("sage", "mlp")]  # (model, decoder)


def _data():
    from gnndist.datasets import synthetic  # here: the spawned ranks importing this module never load torch_geometric
    from gnndist.datasets.edge_split import random_edge_split, set_edge_split

    data = synthetic(240, avg_degree=6, num_classes=4, num_features=12, seed=7)
    return set_edge_split(data, *random_edge_split(data.edge_index, 240, (0.7, 0.15, 0.15), seed=3))


def _partition(data, parts, out, valedges=True):
    from gnndist.partition import partition

    partition(data, parts, **QUICK_PARTITION).save(out, dataset="toy", progress=False, valedges=valedges)
    return str(out)


def _cfg(model, decoder, valedges):
    from gnndist.config import TrainConfig

    cfg = TrainConfig()
    cfg.model.model, cfg.model.hidden, cfg.model.dropout, cfg.model.normalize_features = model, 8, 0.5, False
    cfg.task.task, cfg.task.decoder, cfg.task.use_valedges_as_input = "link", decoder, valedges
    cfg.optim.epochs, cfg.run.progress = EPOCHS, False
    return cfg


def _trained(graph, model, decoder):
    from gnndist.training.trainer import Trainer

    trainer = Trainer(graph, _cfg(model, decoder, True))
    for epoch in range(EPOCHS):
        with graph.context.step(seed=0, epoch=epoch):
            trainer.train_step(epoch)
    trainer.model.eval()
    return trainer


def _rank_job(grid, partdir):
    from gnndist.graph import DistGraph
    from gnndist.tasks.link import LinkTask

    out = {}
    for case in CASES:
        graph = DistGraph.load(partdir, grid)
        trainer = _trained(graph, *case)
        task, model = trainer.task, trainer.model
        with_flag = trainer.evaluate()
        without = LinkTask(graph, _cfg(*case, False)).evaluate(model, contextlib.nullcontext)  # the same weights
        with torch.no_grad():
            h = task.rows(model, task.test_graph, contextlib.nullcontext)  # [n_owned, d]
            scores = task.scores(model, h, task.pairs["test"])  # this rank's slice of the test positives
        out[case] = dict(with_flag=with_flag, without=without, scores=scores, rows=h,
                         ids=task.test_graph.orig_id[: graph.n_owned].long())
    if grid.world_size == 4:  # two candidate layouts (1d, 2d): which of the valedges graph's auto builds
        out["auto"] = _auto_built(grid, partdir)
    return out


def _auto_built(grid, partdir):
    """Under ``--strategy auto`` (a fixed network: no probe), which candidates of the valedges graph are built after an
    evaluation, and which each layer chose."""
    from gnndist.partition import load

    from gnndist.graph import DistGraph
    from gnndist.training.trainer import Trainer

    cfg = _cfg("gcn", "dot", True)
    cfg.dist.strategy, cfg.dist.network = "auto", "ethernet"
    trainer = Trainer(DistGraph.from_config(*load(partdir, grid.rank), grid, cfg, root=partdir), cfg)
    trainer.evaluate()
    strategy = trainer.task.test_graph.strategy
    return {"built": sorted(o.describe() for o in strategy.options if o.built),
            "chosen": sorted({o.describe() for o in strategy.chosen.values()}),
            "candidates": [o.describe() for o in strategy.options]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    data = _data()
    return {world: run_distributed(_rank_job, world, _partition(data, world, tmp_path_factory.mktemp(f"v{world}")))
            for world in (1, 4)}


@pytest.mark.parametrize("world", [4])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_test_metric_and_scores_equal_one_process(runs, world, case):
    one = runs[1][0][case]
    for key, value in one["with_flag"].items():
        for got in runs[world]:
            assert abs(got[case]["with_flag"][key] - value) <= 1e-4, key
    scores = torch.cat([got[case]["scores"] for got in runs[world]])  # slices in rank order: the split's order
    assert_close(f"test scores P={world}", one["scores"], scores, rtol=1e-4)
    rows = torch.full_like(one["rows"], float("nan"))
    for got in runs[world]:
        rows[got[case]["ids"]] = got[case]["rows"]
    assert_close(f"test rows P={world}", one["rows"][torch.argsort(one["ids"])], rows, rtol=1e-4)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_the_flag_changes_the_test_metric_alone(runs, case):
    for got in runs[1] + runs[4]:
        with_flag, without = got[case]["with_flag"], got[case]["without"]
        assert with_flag.keys() == without.keys()
        for key in with_flag:  # train and validation: the training edges' rows, bit for bit
            if not key.startswith("test_"):
                assert with_flag[key] == without[key], key
        assert all(with_flag[k] != without[k] for k in with_flag if k.startswith("test_")), (with_flag, without)


def test_auto_on_the_valedges_graph_builds_only_what_it_chose(runs):
    """The sub-partition stores every layout's counts, so ``auto`` decides from them and builds the chosen layout
    alone (an earlier version built every candidate to count it)."""
    for got in runs[4]:
        auto = got["auto"]
        assert len(auto["candidates"]) > 1  # at P = 4: 1d and 2d
        assert auto["built"] == auto["chosen"] and auto["chosen"], auto


def test_test_rows_are_those_of_the_training_and_validation_graph(tmp_path):
    """The second pass equals the encoder on a partition whose message graph is training + validation edges."""
    from gnndist.datasets.graph import clean_edges

    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph

    data = _data()
    trainer = _trained(DistGraph.load(_partition(data, 1, tmp_path / "a"), ProcessGrid()), "gcn", "dot")
    task = trainer.task
    both = torch.cat([data.link.train, data.link.valid])
    other = _data()
    other.edge_index = clean_edges(both[:, 0].numpy(), both[:, 1].numpy(), 240)  # OGB's full_adj_t
    g = DistGraph.load(_partition(other, 1, tmp_path / "b", valedges=False), ProcessGrid())
    with torch.no_grad():
        ref = trainer.model(g, g.x)[torch.argsort(g.orig_id.long())]
        got = task.rows(trainer.model, task.test_graph, contextlib.nullcontext)
        plain = trainer.model(trainer.graph, trainer.graph.x)
    assert_close("test rows", ref, got[torch.argsort(task.test_graph.orig_id[: g.n_owned].long())], rtol=1e-5)
    assert (plain - got).abs().max() > 1e-3  # the training graph's rows are others


def _held(root, name=None):
    """Every stored entry ``(u, v)`` of a partition's rows of ``A`` (or of its sub-partition ``name``), dataset ids,
    and each part's owned dataset ids."""
    from pathlib import Path

    from gnndist.partition.format import read_inner, read_meta, read_part

    meta = read_meta(root)
    folder, meta = (Path(root) / name, read_inner(root, name, meta)) if name else (Path(root), meta)
    held, owned = set(), []
    for k in range(meta["parts"]):
        a = {key: torch.from_numpy(v.copy()) for key, v in read_part(folder, k, meta).items()}
        ids = a["orig_id"].long()
        rows = torch.repeat_interleave(torch.arange(len(a["rowptr"]) - 1), a["rowptr"].long().diff())
        held |= set(zip(ids[rows].tolist(), ids[a["col"].long()].tolist()))
        owned.append(ids[: len(a["rowptr"]) - 1])
    return held, owned


@pytest.mark.parametrize("parts", [1, 3])
def test_second_graph_holds_training_and_validation_edges_and_no_test_edge(tmp_path, parts):
    data = _data()
    root = _partition(data, parts, tmp_path / "p")
    both = lambda pairs: {(u, v) for u, v in pairs.tolist()} | {(v, u) for u, v in pairs.tolist()}  # noqa: E731
    train, valid, test = (both(getattr(data.link, s)) for s in ("train", "valid", "test"))
    second, owned = _held(root, "valedges")
    first, owned_first = _held(root)
    assert second == train | valid and first == train  # exactly; the training graph unchanged
    assert test and not second & test  # no test edge, in either direction
    assert all(torch.equal(a, b) for a, b in zip(owned, owned_first))  # the same owners, the same local ids
    assert main(["info", root]) == 0  # its files are verified with the partition's


def test_run_ogbl_collab_layout_with_valedges_on_two_ranks(tmp_path, capsys, monkeypatch, pooled_ranks):
    """OGB's collab layout by name with the flag: the cached partition is another (``-valedges``) and holds it."""
    from gnndist.datasets import synthetic
    from gnndist.datasets.ogbl import write_ogbl

    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("GNNDIST_PARTITIONS", raising=False)
    write_ogbl(synthetic(200, avg_degree=8, num_classes=3, num_features=6, seed=3), str(tmp_path / "root"))
    assert main(["run", "ogbl-collab", "--root", str(tmp_path / "root"), "--ranks", "2", "--epochs", "2",
                 "--hidden", "8", "--layers", "2", "--use-valedges-as-input", "--no-progress", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["metric"] == "hits@50" and 0.0 <= out["test_hits@50"] <= 1.0
    (cached,) = (tmp_path / "data" / "partitions").iterdir()
    assert cached.name.endswith("-valedges") and (cached / "valedges" / "META.json").is_file()


def test_cache_key_names_the_second_graph():
    from gnndist.config import DataConfig, PartitionConfig, TaskConfig
    from gnndist.parts.cache import partition_dir

    key = lambda task: partition_dir("cora", PartitionConfig(parts=2), DataConfig(), task=task).name  # noqa: E731
    assert key(TaskConfig(use_valedges_as_input=True)) == key(None) + "-valedges"
    assert key(TaskConfig()) == key(None)
