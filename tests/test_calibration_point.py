"""Every run is a calibration point: its ``--json`` summary and per-epoch log carry the cost model's epoch
(:func:`gnndist.cost.run_time`) for the layouts that ran, beside the measured one."""

import json
import math

import numpy as np
import pytest
from gnndist.partition import load, read_meta

from gnndist import cost
from gnndist.cli import main
from gnndist.cost import model_widths
from gnndist.nn.models import MODELS


@pytest.mark.parametrize("model, strategy, network, comm", [("gcn", "1d", "ib", "fp32"),
                                                            ("sage", "auto", "ethernet", "bf16")],
                         ids=["gcn-1d-ib", "sage-auto-ethernet-bf16"])
def test_run_reports_the_modelled_epoch_of_its_layouts(part2, tmp_path, capsys, pooled_ranks, model, strategy,
                                                       network, comm):
    log = tmp_path / "log.jsonl"
    assert main(["train", str(part2), "--ranks", "2", "--epochs", "2", "--model", model, "--hidden", "8",
                 "--layers", "2", "--strategy", strategy, "--network", network, "--comm-dtype", comm, "--json",
                 "--no-progress", "--log-file", str(log)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    modelled = summary["model_epoch_time_s"]
    assert modelled > 0 and math.isfinite(modelled) and summary["epoch_time_s"] > 0
    assert summary["model_network"] == network and summary["model_constants"] == cost.NETWORKS[network].as_dict()
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["model_time_s"] for r in rows] == [modelled] * 2  # beside each epoch's measured time_s

    # the same number from the cost model called directly on the partition's stored counts of the layouts
    meta = read_meta(part2)
    tags = sorted(summary["strategies"])
    assert tags == ["layer0", "layer1"] and all(summary["strategies"][t]["strategy"] == "1d" for t in tags)
    loads = [[cost.RankLoad.from_array(a) for a in meta["layouts"]["1"]]] * 2  # 1d on both layers (P = 2)
    x = [load(part2, r)[0]["x"] for r in range(2)]
    density = sum(np.count_nonzero(a) for a in x) / (meta["N"] * meta["F"])
    widths = model_widths(meta["F"], meta["classes"], 8, 2)
    direct = cost.run_time(model, widths, loads, cost.NETWORKS[network], density, 2 if comm == "bf16" else 4)
    assert modelled == pytest.approx(direct.total, rel=1e-12)


def test_run_time_is_none_for_what_the_model_does_not_describe():
    ld = [[cost.RankLoad(expand_send=3, expand_recv=3, messages=1, nnz=10, rows=5)]]
    net = cost.NETWORKS["ib"]
    assert cost.run_time(MODELS["gat"].cost, (4, 2), ld, net) is None
    assert cost.run_time("gcn", (4, 8, 2), ld, net) is None  # two layers, one layout
    assert (cost.run_time("gcn", (4, 2), ld, net).total
            == cost.step_time(ld, cost.model_layers("gcn", (4, 2)), net).total)
