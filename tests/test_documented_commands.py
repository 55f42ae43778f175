"""Every documented command is a tested command: each ``gnndist ...`` and ``torchrun ... -m gnndist.cli ...``
line of README.md, the site's pages (docs/**/*.md) and the benchmark pages (benchmarks/README.md,
benchmarks/results/*.md) parses with the CLI's own parser (and torchrun's, for torchrun lines).

A document cannot name a flag that does not exist, a choice that is not one, or a spelling that
torchrun's parser would take. Lines of code blocks must parse whole; commands quoted in prose
(`gnndist export --format pyg`) may leave out a required argument, nothing else.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
from torch.distributed.run import get_args_parser

from gnndist.cli import build_parser

CHECKOUT = Path(__file__).resolve().parents[1]
DOCS = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").rglob("*.md")), CHECKOUT / "benchmarks" / "README.md",
        *sorted((CHECKOUT / "benchmarks" / "results").glob("*.md"))]
SUBCOMMANDS = ("partition", "synth", "info", "train", "run", "predict", "export", "simulate", "bench")
_START = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:\S*/)?(gnndist|torchrun)\s")  # env assignments, then the program
_INLINE = re.compile(r"`((?:\S*/)?(?:gnndist|torchrun) [^`]+)`")
_PLACEHOLDER = re.compile(r"invalid (?:choice|int value|float value): '([A-Z][A-Z_]*)'")  # --ranks N, bench SUITE


def _commands(text: str) -> list[tuple[int, str, bool]]:
    """``(line, command, whole)`` for each command of a markdown text: code blocks (indented or fenced, with
    ``\\`` continuations joined) must parse whole; inline spans may leave out required arguments."""
    out, fenced, pending = [], False, None
    lines = text.splitlines()
    for i, raw in enumerate(lines, 1):
        if raw.lstrip().startswith("```"):
            fenced = not fenced
            continue
        code = fenced or raw.startswith("    ")
        if pending is not None:
            start, acc = pending
            acc += " " + raw.strip()
            if acc.endswith("\\"):
                pending = (start, acc[:-1])
            else:
                out.append((start, acc, True))
                pending = None
            continue
        line = raw.strip()
        if code and _START.match(line):
            if line.endswith("\\"):
                pending = (i, line[:-1])
            else:
                out.append((i, line, True))
        elif not code:
            out += [(i, m.group(1), False) for m in _INLINE.finditer(raw)]
    return out


def _argv(command: str) -> list[str]:
    """The words of one command line: up to a comment, pipe or redirection; ``[optional parts]`` kept;
    shell substitutions as one word; of a synopsis's ``a|b|c``, ``a``."""
    command = re.sub(r"\$\([^)]*\)", "X", command).replace("[", " ").replace("]", " ")
    words = shlex.split(command, comments=True)
    for stop in ("|", ">", "&&", ";", "2>", ">>"):
        if stop in words:
            words = words[:words.index(stop)]
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    return [w.split("|")[0] if "|" in w.strip("|") else w for w in words]  # a synopsis's a|b|c: its first


def _parse(argv: list[str]) -> str | None:
    """None when the CLI's parser takes ``argv`` (the words after ``gnndist``), else its error line."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(argv)
    except SystemExit as e:
        return err.getvalue().strip() or f"exit {e.code}"
    return None


def _check(command: str, whole: bool) -> str | None:
    """What is wrong with one documented command, or None."""
    words = _argv(command)
    program = Path(words[0]).name
    if program == "torchrun":
        if "gnndist.cli" not in words:
            return None  # torchrun's own options, or another program
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = get_args_parser().parse_args(words[1:])
        except SystemExit:
            if _PLACEHOLDER.search(err.getvalue()):
                return None
            return f"torchrun's parser refuses it: {err.getvalue().strip().splitlines()[-1]}"
        if args.training_script != "gnndist.cli" or not args.module:
            return None  # torchrun running something else
        words = ["gnndist", *args.training_script_args]
    if len(words) < 2 or words[1] not in SUBCOMMANDS:
        return None if not whole else f"not a subcommand: {words[1:2]}"
    if not whole and len(words) == 2:
        return None  # prose naming a subcommand
    error = _parse(words[1:])
    if error and (_PLACEHOLDER.search(error) or not whole and "the following arguments are required" in error):
        return None  # a placeholder for a value (ALL CAPS), or prose leaving out what it does not discuss
    return error


def _documented() -> list[tuple[str, str, bool]]:
    return [(f"{doc.relative_to(CHECKOUT)}:{line}", cmd, whole)
            for doc in DOCS for line, cmd, whole in _commands(doc.read_text())]


def test_every_documented_command_parses():
    found = _documented()
    assert sum(whole for _, _, whole in found) >= 30 and any("torchrun" in c for _, c, _ in found)  # the docs were read
    bad = [f"{where}: {cmd}\n    {problem}" for where, cmd, whole in found if (problem := _check(cmd, whole))]
    assert not bad, "documented commands the CLI refuses:\n" + "\n".join(bad)


@pytest.mark.parametrize("doc,problem", [
    ("    gnndist run cora --nproc 2\n", "--nproc is --ranks"),
    ("    torchrun --standalone --nproc-per-node 2 -m gnndist.cli run cora --log run.jsonl\n",
     "ambiguous option: --log"),
    ("    gnndist partition cora --parts 4 \\\n        --method metiss\n", "invalid choice: 'metiss'"),
    ("Run `gnndist train PARTDIR --epoch 3` to train.\n", "unrecognized arguments: --epoch"),
    ("```\ngnndist predict cora --out p.npy\n```\n", "required: --checkpoint"),
])
def test_a_wrong_command_in_a_document_is_found(doc, problem):
    (line, cmd, whole), = _commands(doc)
    found = _check(cmd, whole)
    assert found is not None and problem in found, found


def test_prose_may_name_a_subcommand_or_leave_out_required_arguments():
    text = "`gnndist predict` writes rows; `gnndist export --format pyg` loads into PyG.\n"
    assert [_check(c, w) for _, c, w in _commands(text)] == [None, None]
