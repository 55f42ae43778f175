"""A part's contents as declared components: each writes its own arrays, says its disk bytes and memory term, and
reads its own fields; the partition writer, its space estimate, a rank's reader and the memory model use nothing else.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gnndist.datasets import synthetic
from gnndist.partition import partition
from gnndist.partition.components import (
    COMPONENTS,
    EDGE_FEATURES,
    EXCHANGES,
    FEATURES,
    LABELS,
    LINK_SPLIT,
    MASKS_PART,
    STRUCTURE,
    Component,
    RankRows,
    read_fields,
    register_component,
    training_rows_bytes,
)


def _link_data():
    from gnndist.datasets.edge_split import random_edge_split, set_edge_split

    data = synthetic(150, avg_degree=5, num_classes=3, num_features=5, seed=3)
    split, message = random_edge_split(data.edge_index, 150, (0.8, 0.1, 0.1), seed=0)
    set_edge_split(data, split, message)
    return data


def _edge_data():
    data = synthetic(120, avg_degree=4, num_classes=3, num_features=4, seed=1)
    data.edge_attr = torch.arange(data.edge_index.shape[1] * 2, dtype=torch.float32).view(-1, 2)
    return data


@pytest.mark.parametrize("kind", ["plain", "edge-features", "link"])
def test_each_component_writes_its_own_arrays_and_their_bytes(kind):
    """The parts are the union of the components' arrays, in their order, no name written twice; the space estimate
    is the sum of theirs, and each row component's is what its arrays take (the structure's: its ids and entries,
    the halo's ids and plans aside)."""
    from gnndist.partition.layouts import layout_counts

    data = {"plain": lambda: synthetic(100, avg_degree=4, num_classes=3, num_features=4, seed=0),
            "edge-features": _edge_data, "link": _link_data}[kind]()
    p = partition(data, 2, method="random", progress=False)
    held = p.components()
    assert held[:5] == [STRUCTURE, FEATURES, LABELS, EXCHANGES, MASKS_PART]
    assert (LINK_SPLIT in held) == (kind == "link") and (EDGE_FEATURES in held) == (kind == "edge-features")
    counts = layout_counts(p.csr, p.book.offsets)
    writers = [c.writer(p, counts) for c in held]
    taken = dict.fromkeys(held, 0)
    for lp, arrays in zip(p.local_parts(), p.part_arrays(counts)):
        names = []
        for c, write in zip(held, writers):
            mine = write(lp)
            names += list(mine)
            taken[c] += sum(a.nbytes for a in mine.values())
        assert len(names) == len(set(names)) and names == list(arrays)
    assert p.disk_bytes() == sum(c.disk_bytes(p) for c in held)
    for c in held:
        if c not in (STRUCTURE, EXCHANGES):
            assert c.disk_bytes(p) == taken[c], c.name
    n, nnz = int(p.csr.num_nodes), int(p.csr.nnz)
    assert taken[STRUCTURE] >= n * (4 + 4 + 4) + nnz * 4 and STRUCTURE.disk_bytes(p) >= n * 20  # int32 ids stored


def test_the_reader_gives_every_components_fields(tmp_path):
    """A rank's fields come from the components' readers: a part without a component's arrays gets its defaults."""
    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph

    p = partition(_link_data(), 1, method="random", progress=False)
    arrays = next(p.part_arrays())
    meta = {"classes": 3, "N": 150, "num_train": 0, "link": {}}
    t = {k: torch.from_numpy(np.asarray(v)) for k, v in arrays.items()}
    fields = read_fields(t, meta, len(arrays["x"]), 0)
    assert fields["link"] is not None and set(fields["link"]) >= {"train", "valid", "test", "home"}
    assert fields["hetero"] is None and fields["relations"] == () and fields["edge_attr"] is None
    plain = {k: v for k, v in t.items() if not k.startswith("link_")}
    assert read_fields(plain, meta, len(arrays["x"]), 0)["link"] is None
    graph = DistGraph.load(p.save(tmp_path / "p", dataset="toy", progress=False), ProcessGrid())
    for name, value in fields.items():
        assert hasattr(graph, name), name
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(getattr(graph, name), value, msg=name)


def test_the_memory_terms_are_the_fitted_training_model():
    """A node part's memory terms add up to the training peak's fitted per-node bytes (benchmarks/README.md)."""
    for rows, halo, send, f in [(1000, 200, 150, 64), (7, 0, 0, 1), (0, 0, 0, 0)]:
        want = 4 * f * rows + 24 * (rows + halo) + 15 * rows + 8 * (halo + send)
        assert training_rows_bytes(RankRows(rows, halo, send, 10 * rows, f)) == want


def test_a_component_name_is_registered_once():
    class Other(Component):
        name = "features"

    with pytest.raises(ValueError, match="registered already"):
        register_component(Other())
    assert register_component(FEATURES) is FEATURES and COMPONENTS.count(FEATURES) == 1
