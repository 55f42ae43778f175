"""gnndist's flags under torchrun: none is taken by torchrun's own parser, and two torchrun agents train exactly.

torchrun's parser matches abbreviations of its options anywhere in the command line, the
script's arguments included: ``--log`` was ambiguous (``--log-dir``, ``--logs-specs``) and
failed the job before it started. Every flag of every subcommand must reach the script unchanged,
and there is one spelling of each: the old ``--log`` / ``--nproc`` and abbreviations are refused.
"""

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys

import pytest
from torch.distributed.run import get_args_parser

from gnndist.cli import RENAMED, build_parser
from gnndist.machine import free_port

POSITIONAL = {"bench": "strong"}  # a subcommand's first positional, where "X" is not one of its choices
LAUNCH = ["--nnodes", "1", "--nproc-per-node", "1", "-m", "gnndist.cli"]


def _flags() -> list[tuple[str, str, bool, bool]]:
    """(subcommand, flag, takes a value, primary spelling) for every flag of every subcommand."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [(name, flag, action.nargs != 0, action.help != argparse.SUPPRESS)
            for name, parser in sub.choices.items() for action in parser._actions
            for flag in action.option_strings if flag not in ("-h", "--help")]


def _torchrun_passes(sub: str, flag: str, takes_value: bool) -> bool:
    """True when torchrun's parser hands ``gnndist.cli SUB X FLAG [1]`` to the script unchanged."""
    script = [sub, POSITIONAL.get(sub, "X"), flag] + (["1"] if takes_value else [])
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = get_args_parser().parse_args(LAUNCH + script)
    except SystemExit:
        return False
    return args.training_script == "gnndist.cli" and args.training_script_args == script


def test_every_flag_reaches_the_script_through_torchrun():
    flags = _flags()
    assert {"--log-file", "--ranks", "--epochs", "--json", "--no-progress"} <= {f for _, f, _, _ in flags}
    taken = sorted({(sub, flag) for sub, flag, value, primary in flags
                    if primary and not _torchrun_passes(sub, flag, value)})
    assert not taken, f"torchrun's parser takes these gnndist flags: {taken}"
    assert all(primary for _, _, _, primary in flags), "a hidden second spelling of a flag"
    assert all(not _torchrun_passes("train", flag, True) for flag in RENAMED)  # what the old spellings were refused for


@pytest.mark.parametrize("argv,hint", [(["--nproc", "2"], "--nproc is --ranks"),
                                       (["--log", "a.jsonl"], "--log is --log-file"),
                                       (["--log-f", "a.jsonl"], "unrecognized arguments: --log-f")])
def test_old_spellings_and_abbreviations_are_refused_in_one_line(argv, hint, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["train", "P", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and hint in err and len(err.strip().splitlines()) == 1, err
    text = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    assert "--log-file" in text and "--ranks" in text and "--nproc" not in text


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                             "MASTER_ADDR", "MASTER_PORT")}
    return {**env, "OMP_NUM_THREADS": "1"}


def test_two_torchrun_agents_equal_ranks_2(part2, tmp_path):
    """``torchrun --nnodes 2`` as two agents on localhost (c10d rendezvous assigns the node ranks), and beside them
    ``torchrun --standalone --nproc-per-node 2``, give the numbers of ``gnndist train --ranks 2``, epoch by epoch;
    the command line is the one that used to fail."""
    flags = ["--epochs", "3", "--json", "--no-progress"]
    port = free_port()
    logs = [tmp_path / f"agent{i}.jsonl" for i in range(2)]
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "gnndist-test",
         "--local-addr", "127.0.0.1", "-m", "gnndist.cli", "train", str(part2), "--log-file", str(log)] + flags,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True)
        for log in logs]
    standalone_log = tmp_path / "standalone.jsonl"
    agents.append(subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "gnndist.cli",
         "train", str(part2), "--log-file", str(standalone_log)] + flags,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True))
    try:
        *outs, standalone = [a.communicate(timeout=150) for a in agents]
    finally:
        for a in agents:  # a failed or hung agent leaves no process behind
            if a.poll() is None:
                os.killpg(a.pid, signal.SIGKILL)
                a.wait()
    assert [a.returncode for a in agents] == [0, 0, 0], [err[-2000:] for _, err in [*outs, standalone]]
    ref_log = tmp_path / "ref.jsonl"
    ref = subprocess.run([sys.executable, "-m", "gnndist.cli", "train", str(part2), "--ranks", "2",
                          "--log-file", str(ref_log)] + flags, capture_output=True, text=True, timeout=150, env=_env())
    assert ref.returncode == 0, ref.stderr[-2000:]
    written = [log for log in logs if log.exists()]  # rank 0 writes the log and the summary: one agent holds it
    assert len(written) == 1
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs if out.strip()]
    assert len(summaries) == 1
    want = json.loads(ref.stdout.strip().splitlines()[-1])
    assert summaries[0]["nproc"] == want["nproc"] == 2
    assert summaries[0]["final_loss"] == pytest.approx(want["final_loss"], abs=1e-5)
    assert summaries[0]["test_acc"] == want["test_acc"]
    rows = [json.loads(line) for line in written[0].read_text().splitlines()]
    ref_rows = [json.loads(line) for line in ref_log.read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in ref_rows], abs=1e-5)
    one = json.loads(standalone[0].strip().splitlines()[-1])  # one machine's torchrun: the same run, bit for bit
    assert one["nproc"] == 2 and one["final_loss"] == want["final_loss"] and one["test_acc"] == want["test_acc"]
    standalone = [json.loads(line)["loss"] for line in standalone_log.read_text().splitlines()]
    assert standalone == [r["loss"] for r in ref_rows]
