"""Link prediction on P ranks equals one process: per-epoch losses, the first step's gradients, the learned rows
of a featureless graph; the edge split keeps validation and test edges out of the message graph; bad input is
one line.

Ranks are spawned once per world size; each rank runs every case and returns what the parent compares.
"""

import pytest
import torch

from gnndist.testing import QUICK_PARTITION, assert_close, run_distributed

CHECK_COLLECTIVES = False  # long loops compared with one process: tests/conftest.py's _collective_check

EPOCHS = 5
CASES = [  # (model, decoder, edge batch, featureless, metric, negatives per positive, the MLP decoder's layers,
    #         --embedding: learn on a featured graph puts learned rows beside the features)
    ("gcn", "dot", 0, False, "auc", 1, 3, "zero"),
    ("sage", "mlp", 0, False, "hits@20", 1, 3, "zero"),
    ("gcn", "mlp", 60, True, "auc", 1, 3, "zero"),
    ("sage", "dot", 40, False, "mrr", 1, 3, "zero"),
    ("gcn", "mlp", 0, False, "auc", 3, 2, "zero"),
    ("sage", "dot", 40, False, "mrr", 3, 3, "zero"),
    ("propgcn", "mlp-norm", 0, False, "hits@20", 3, 3, "learn"),  # Refined-GAE citation2's: rows beside features
    ("propgcn", "mlp-res", 0, False, "hits@20", 3, 3, "zero"),  # Refined-GAE's pieces: layer norms in both
]


def _data(featureless: bool = False, mrr: bool = False):
    from gnndist.datasets import synthetic  # here: the spawned ranks importing this module never load torch_geometric
    from gnndist.datasets.edge_split import random_edge_split, set_edge_split

    data = synthetic(240, avg_degree=6, num_classes=4, num_features=12, seed=7)
    split, message = random_edge_split(data.edge_index, 240, (0.8, 0.1, 0.1), seed=3)
    if mrr:  # per-positive negatives: 7 destinations for each positive's source (citation2's form)
        g = torch.Generator().manual_seed(5)
        split.valid_neg = torch.randint(0, 240, (split.valid.shape[0], 7), generator=g)
        split.test_neg = torch.randint(0, 240, (split.test.shape[0], 7), generator=g)
        split.metric = "mrr"
    set_edge_split(data, split, message)
    if featureless:
        data.x = torch.zeros(240, 0)
    return data


def _cfg(model, decoder, batch, metric, epochs=EPOCHS, negatives=1, decoder_layers=3, embedding="zero"):
    from gnndist.config import TrainConfig

    cfg = TrainConfig()
    cfg.model.model, cfg.model.hidden, cfg.model.dropout, cfg.model.normalize_features = model, 8, 0.5, False
    cfg.task.task, cfg.task.decoder, cfg.task.edge_batch, cfg.task.negatives = "link", decoder, batch, negatives
    cfg.task.decoder_layers, cfg.model.embedding = decoder_layers, embedding
    if model == "propgcn":  # the shared layer applied twice, after layer norm and dropout
        cfg.model.layers, cfg.model.norm = 3, "layer"
    cfg.eval.metric = metric if metric != "mrr" else "auto"
    cfg.optim.epochs, cfg.run.progress = epochs, False
    return cfg


def _rank_job(grid, dirs, epochs=EPOCHS):
    from gnndist.graph import DistGraph
    from gnndist.training.trainer import Trainer

    out = {}
    for case in CASES:
        model, decoder, batch, featureless, metric, negatives, layers, embedding = case
        graph = DistGraph.load(dirs[(featureless, metric == "mrr")], grid)
        trainer = Trainer(graph, _cfg(model, decoder, batch, metric, epochs, negatives, layers, embedding))
        losses, grads = [], None
        for epoch in range(epochs):
            with graph.context.step(seed=0, epoch=epoch):
                losses.append(trainer.train_step(epoch))
            if grads is None:
                grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()
                         if p.grad is not None and id(p) not in {id(q) for q in trainer.sharded}}
        emb = trainer.model.embedding
        rows = (emb.ids.clone(), emb.weight.detach().clone()) if emb is not None else None
        out[case] = dict(losses=losses, grads=grads, rows=rows, metrics=trainer.evaluate(),
                         bytes=graph.context.counter.per_tag().get("pairs"))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from gnndist.partition import partition

    results = {}
    datasets = {(f, m): _data(f, m) for f, m in ((False, False), (True, False), (False, True))}
    for world in (1, 3):  # 3 ranks: most pairs have an endpoint on another rank (2 proved nothing more)
        dirs = {}
        for key, data in datasets.items():
            d = tmp_path_factory.mktemp(f"p{world}")
            partition(data, world, **QUICK_PARTITION).save(d, dataset="toy", progress=False)
            dirs[key] = str(d)
        results[world] = run_distributed(_rank_job, world, dirs)
    return results


@pytest.mark.parametrize("world", [3])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_link_training_equals_one_process(runs, world, case):
    one = runs[1][0][case]
    ref = torch.tensor(one["losses"], dtype=torch.float64)
    assert ref[-1] < ref[0]  # it trains
    for got in runs[world]:
        got = got[case]
        assert_close(f"losses P={world}", ref, torch.tensor(got["losses"], dtype=torch.float64), rtol=1e-5)
        scale = max(g.abs().max().item() for g in one["grads"].values())
        assert set(got["grads"]) == set(one["grads"])
        for name, g in one["grads"].items():  # the first step's gradients, every replicated parameter
            assert (got["grads"][name] - g).abs().max().item() <= 1e-6 * scale, name  # the decoder sums in fp64
        assert got["metrics"].keys() == one["metrics"].keys()
        for key, value in one["metrics"].items():  # the same weights would score alike: the trajectory is close
            assert abs(got["metrics"][key] - value) <= 1e-4, key
    if case[3] or case[7] == "learn":  # learned rows (featureless, or beside): gathered by id, equal one process's
        ids1, rows1 = one["rows"]
        full = torch.full_like(rows1, float("nan"))
        for got in runs[world]:
            ids, rows = got[case]["rows"]
            full[ids] = rows
        assert_close(f"embedding rows P={world}", rows1[torch.argsort(ids1)], full, rtol=1e-4)


def test_pairs_cross_ranks(runs):
    """On 3 ranks most pairs have an endpoint elsewhere: rows travel (and nothing travels on one rank)."""
    case = CASES[0]
    assert all(r[case]["bytes"] is None or r[case]["bytes"]["fwd_sent"] == 0 for r in runs[1])
    assert sum(r[case]["bytes"]["fwd_sent"] for r in runs[3]) > 0


def test_metric_keys_of_a_link_run(runs):
    assert set(runs[1][0][CASES[0]]["metrics"]) == {f"{s}_{m}" for s in ("train", "val", "test") for m in ("auc", "ap")}
    assert set(runs[1][0][CASES[1]]["metrics"]) == {"train_hits@20", "val_hits@20", "test_hits@20"}
    assert set(runs[1][0][CASES[3]]["metrics"]) == {"train_mrr", "val_mrr", "test_mrr"}


def test_the_train_metric_scores_a_spread_subset_the_same_at_any_p():
    """About E_val of the E_train positives, from the whole split (not its first E_val), the union of every rank's
    slice at P = 2, 3, 4 the subset of one process; another seed, another subset."""
    from gnndist.partition.link import pair_slice

    from gnndist.tasks.link import train_eval_subset

    e_train, e_val = 20_000, 2_000
    every = torch.arange(e_train)
    one = every[train_eval_subset(every, e_train, e_val, seed=0)]
    assert abs(one.numel() - e_val) < 5 * e_val ** 0.5
    assert one.max() > e_train - 100 and one.min() < 100  # spread over the split
    halves = (one < e_train // 2).sum().item()
    assert abs(halves - one.numel() / 2) < 5 * e_val ** 0.5
    for world in (2, 3, 4):
        parts = []
        for rank in range(world):
            lo, hi = pair_slice(e_train, rank, world)
            index = torch.arange(lo, hi)
            parts.append(index[train_eval_subset(index, e_train, e_val, seed=0)])
        assert torch.equal(torch.cat(parts), one)
    assert not torch.equal(every[train_eval_subset(every, e_train, e_val, seed=1)], one)
    assert train_eval_subset(every, e_train, e_train, seed=0).all()  # E_val = E_train: every positive


def test_message_graph_holds_no_validation_or_test_edge(tmp_path):
    """Every rank's rows of A (in dataset ids) miss every validation and test edge, in both directions."""
    from gnndist.partition import partition

    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph

    data = _data()
    partition(data, 1, **QUICK_PARTITION).save(tmp_path, dataset="toy", progress=False)
    g = DistGraph.load(tmp_path, ProcessGrid())
    csr = g.csr
    rows = torch.repeat_interleave(torch.arange(g.n_owned), csr.rowptr.diff())
    ids = g.orig_id.long()
    held = set(zip(ids[rows].tolist(), ids[csr.col.long()].tolist()))
    for split in (data.link.valid, data.link.test):
        for u, v in split.tolist():
            assert (u, v) not in held and (v, u) not in held
    train = data.link.train.tolist()
    assert all((u, v) in held and (v, u) in held for u, v in train)  # the training edges are the message graph
