"""The large real files of the team's offline datasets load with their published counts (moved from the suite).

    python benchmarks/real_datasets.py

The suite tests these readers on Amazon Photo (the Shchur npz) and on small files it writes (MUSAE, FB100's .mat);
the three large files below took ~15 s of the suite on 2 cores and prove nothing more about the readers, so their
published counts are checked here: nodes, directed edges, classes, feature width, the split, and the loaded graph's
contract (:func:`gnndist.testing.assert_clean`). Reads ``$GNNDIST_SHARED_DATA`` (else ``shared/data`` beside the
checkout); a file that is not there is reported and skipped. Prints one JSON line per graph; exits 1 if a check fails.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _split_sizes(data) -> list[int]:
    return [int(m.sum()) for m in (data.train_mask, data.val_mask, data.test_mask)]


def _coauthor_cs(data) -> None:
    """Coauthor CS (Shchur npz): 20 training and 30 validation nodes per class, the rest test."""
    import torch

    classes = 15
    assert (data.num_nodes, data.edge_index.size(1), data.num_classes) == (18333, 163788, classes)
    for mask, per in ((data.train_mask, 20), (data.val_mask, 30)):
        assert torch.bincount(data.y[mask], minlength=classes).tolist() == [per] * classes
    assert _split_sizes(data)[2] == data.num_nodes - 50 * classes
    assert not bool((data.train_mask & data.val_mask).any() or (data.val_mask & data.test_mask).any())


def _facebook_page(data) -> None:
    """Facebook page-page (MUSAE): 4,714 feature ids."""
    assert (data.num_nodes, data.edge_index.size(1), data.num_classes) == (22470, 341646, 4)
    assert tuple(data.x.shape) == (22470, 4714)


def _cornell5(data) -> None:
    """FB100 Cornell5 (.mat): the labelled nodes (gender 1 or 2) are split, the others are not."""
    assert (data.num_nodes, data.edge_index.size(1), data.num_classes) == (18660, 1581554, 2)
    labelled = int((data.y >= 0).sum())
    assert labelled == 8135 + 8687 and sum(_split_sizes(data)) == labelled


GRAPHS = [("coauthor_cs/coauthor_cs.npz", _coauthor_cs), ("facebook_page_page", _facebook_page),
          ("fb100_cornell5/Cornell5.mat", _cornell5)]


def main() -> int:
    from gnndist.datasets import load

    from gnndist.testing import assert_clean, shared_data

    failed = 0
    for rel, check in GRAPHS:
        path = shared_data(rel)
        row = {"file": rel}
        if not os.path.exists(path):
            print(json.dumps({**row, "status": "missing", "path": path}))
            continue
        t0 = time.perf_counter()
        data = load(path)
        row["load_s"] = round(time.perf_counter() - t0, 2)
        try:
            check(data)
            assert_clean(data)
            row["status"] = "ok"
        except AssertionError as e:
            failed += 1
            row["status"] = f"failed: {check.__doc__.splitlines()[0]} {e}"
        print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
