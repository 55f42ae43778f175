"""The command line derived from the config tree (:mod:`gnndist.config`): one flag per field of a section.

    add_section(parser, PartitionConfig)          # --parts, --method, ... with the fields' defaults, help, choices
    part = build_section(PartitionConfig, args)   # the section back from parsed args, validated by the dataclass
    add_train_args(parser)                        # every training section, flags not given left unset
    given = given_flags(args)                     # what the user passed, by section (for gnndist.presets.compose)
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from gnndist.config import TRAIN_SECTIONS, EvalConfig, TaskConfig


def flag_of(f: dataclasses.Field) -> str:
    """The flag of a config field: its name, ``--name-with-dashes``."""
    return "--" + f.name.replace("_", "-")


def add_section(parser: argparse.ArgumentParser, section: type, skip: tuple[str, ...] = (),
                suppress: bool = False, only: tuple[str, ...] | None = None, help: dict[str, str] | None = None,
                choices: dict[str, tuple] | None = None) -> None:
    """Add one flag per field of a section dataclass (defaults, help and choices from the field).

    ``skip`` leaves fields out (a subcommand with a flag of its own); ``only`` keeps just those.
    ``help`` and ``choices`` (by field name) say what a field means to one subcommand (``--json``'s output,
    the layouts ``predict`` runs). With ``suppress``, a flag the user does not pass leaves no attribute, so
    that model presets can fill it (:func:`gnndist.presets.compose`).
    """
    group = parser.add_argument_group(section.__name__.removesuffix("Config").lower())
    for f in dataclasses.fields(section):
        if f.name in skip or (only is not None and f.name not in only):
            continue
        kw: dict[str, Any] = {"dest": f"{section.__name__}.{f.name}",
                              "help": (help or {}).get(f.name, f.metadata.get("help", ""))}
        default = f.default
        allowed = (choices or {}).get(f.name, f.metadata.get("choices"))
        if isinstance(default, bool):
            kw["action"] = argparse.BooleanOptionalAction
            kw["default"] = default
        else:
            tp = {"int": int, "float": float}.get(str(f.type).split(" ")[0], str)
            kw.update(type=tp, default=default, metavar=None if allowed else f.name.upper())
            if allowed:
                kw["choices"] = allowed
        kw["help"] += f" (default: {default})" if default not in (None, False) else ""
        if suppress:
            kw["default"] = argparse.SUPPRESS
        group.add_argument(flag_of(f), **kw)


def build_section(section: type, args: argparse.Namespace):
    """Instantiate a section from parsed args (fields not on the parser keep their defaults)."""
    ns = vars(args)
    kw = {f.name: ns[f"{section.__name__}.{f.name}"] for f in dataclasses.fields(section)
          if f"{section.__name__}.{f.name}" in ns}
    return section(**kw)


def add_train_args(parser: argparse.ArgumentParser, model_help: str | None = None) -> None:
    """The training flags (``model_help``: ``--model``'s, listing the registered models); ``--metric``'s and
    ``--task``'s help name the datasets whose specs declare their own metric or edge split
    (:mod:`gnndist.datasets.spec`)."""
    from gnndist.datasets.spec import declared_metrics, link_datasets
    from gnndist.tasks import TASKS

    own = {f.name: f.metadata["help"] for sec in (EvalConfig, TaskConfig) for f in dataclasses.fields(sec)}
    tasks = "; ".join(f"{name}: {cls.noun}" for name, cls in TASKS.items())  # the registered tasks (gnndist.tasks)
    help = {"metric": f"{own['metric']}; the datasets' own: {declared_metrics()}",
            "task": f"{own['task']} ({tasks}); the datasets with their own: {', '.join(link_datasets())}",
            **({"model": model_help} if model_help else {})}
    for sec in TRAIN_SECTIONS.values():
        add_section(parser, sec, suppress=True, help=help, choices={"task": ("auto", *TASKS)})


def given_flags(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The training flags the user passed (:func:`add_train_args` leaves the others unset), by section."""
    ns = vars(args)
    return {name: {f.name: ns[f"{sec.__name__}.{f.name}"] for f in dataclasses.fields(sec)
                   if f"{sec.__name__}.{f.name}" in ns} for name, sec in TRAIN_SECTIONS.items()}
