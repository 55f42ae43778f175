"""The module maps stay true: docs/layout.md, docs/architecture.md and the packages' docstrings.

* every path docs/layout.md names exists, and every library module (each ``.py`` of ``gnndist/``, ``partition/``,
  ``kernels/``, ``datasets/``: the packages ``gnndist``, ``gnndist.partition``, ``gnndist.kernels``,
  ``gnndist.datasets``) and every page of ``docs/`` has its line there; a package's ``__init__.py`` is its folder's
  line unless it has one of its own;
* every module docs/architecture.md names exists, and its drawing names every subpackage and top-level module of
  ``gnndist``;
* every dotted name ``gnndist.x.y`` either page writes names a module, or a name bound in one;
* every ``name.py`` a package's docstring lists (``training/__init__.py``'s map, ...) is in that package.

Pure file reading (no import of gnndist, no process): the module runs in a fraction of a second.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from functools import cache
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
LAYOUT = CHECKOUT / "docs" / "layout.md"
ARCHITECTURE = CHECKOUT / "docs" / "architecture.md"
PACKAGES = {"gnndist": "gnndist", "gnndist.partition": "partition", "gnndist.kernels": "kernels",
            "gnndist.datasets": "datasets"}  # as scripts/code_metrics.py maps them
CONTINUATION = 16  # a layout line indented this far (inside the block) continues the description above it
MODULE = re.compile(r"[\w<>]+(?:/[\w<>]+)*\.py\b")  # a module's path: cli.py, nn/models/spec.py, <op>/reference.py
DOTTED = re.compile(r"\bgnndist(?:\.\w+)+")
FOLDER = re.compile(r"^(\w+)/(?:\s|$)")  # a drawing box that opens with its folder: "training/ ─ runs.py ..."


@cache
def library_modules() -> dict[str, str]:
    """Dotted module name -> path from the checkout's root, for every library module."""
    out = {}
    for pkg, folder in PACKAGES.items():
        for f in sorted((CHECKOUT / folder).rglob("*.py")):
            rel = f.relative_to(CHECKOUT)
            parts = [p for p in rel.relative_to(folder).with_suffix("").parts if p != "__init__"]
            if pkg == "gnndist" and parts and parts[0] in ("partition", "kernels", "datasets"):
                continue
            out[".".join([pkg, *parts])] = rel.as_posix()
    return out


def _exists(path: str) -> bool:
    """A path from the checkout's root; ``<op>`` stands for any one folder."""
    return any(CHECKOUT.glob(re.sub(r"<\w+>", "*", path))) if "<" in path else (CHECKOUT / path).exists()


@cache
def layout_paths() -> tuple[str, ...]:
    """Every path docs/layout.md names, from the checkout's root (``<op>`` kept as written).

    The tree is one indented block: a line is ``NAME[, NAME ...]  description``; a name ending in ``/`` is a
    folder holding the lines indented below it; further names of a line share the first one's folder
    (``spmm/triton_kernel.py, triton_plan.py``).
    """
    paths, stack = [], []  # stack: (indent, folder) of the open folders
    for line in LAYOUT.read_text().splitlines():
        if not line.startswith("    ") or not line.strip():
            continue
        body = line[4:]
        indent = len(body) - len(body.lstrip())
        if indent >= CONTINUATION:
            continue
        names = re.split(r"\s{2,}", body.strip())[0].split(", ")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        folder = stack[-1][1] if stack else ""
        first_dir = names[0].rstrip("/").rpartition("/")[0]
        for i, name in enumerate(names):
            rel = name if i == 0 or "/" in name.rstrip("/") else f"{first_dir}/{name}".lstrip("/")
            paths.append(f"{folder}{rel}".rstrip("/"))
        if len(names) == 1 and names[0].endswith("/"):
            stack.append((indent, f"{folder}{names[0]}"))
    return tuple(paths)


@cache
def _layout_pattern() -> re.Pattern:
    """One pattern matching every path docs/layout.md names (``<op>``: any one folder)."""
    return re.compile("|".join(fnmatch.translate(re.sub(r"<\w+>", "*", p)) for p in layout_paths()))


def _listed(path: str) -> bool:
    """``path`` has its line in docs/layout.md; an ``__init__.py`` may have its folder's."""
    keys = [path, path.removesuffix("/__init__.py")] if path.endswith("/__init__.py") else [path]
    return any(_layout_pattern().match(k) for k in keys)


def _drawing_and_prose(text: str) -> tuple[list[str], str]:
    """docs/architecture.md's drawing (the first indented block) and the rest."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    ") and line.strip())
    end = next((i for i in range(start, len(lines)) if lines[i].strip() and not lines[i].startswith("    ")),
               len(lines))
    return lines[start:end], "\n".join(lines[:start] + lines[end:])


def _resolve(token: str, folder: str | None = None) -> str | None:
    """A module written in architecture.md, from the checkout's root: relative to the box's folder, to
    ``gnndist/`` or to the root (in that order); None where none exists."""
    bases = [folder] if folder else []
    for base in [*bases, "gnndist", ""]:
        path = f"{base}/{token}".lstrip("/")
        if _exists(path):
            return path
    return None


def drawing_modules() -> list[tuple[str, str | None]]:
    """``(token, path or None)`` for every module and folder the drawing names.

    A box line that opens with a folder (``training/ ─ runs.py``, ``│  inference/ ─ predict.py``) sets the
    folder of its modules and of the ``│`` lines that follow it; a line that opens a new box resets it.
    """
    drawing, _ = _drawing_and_prose(ARCHITECTURE.read_text())
    out, folder = [], None
    for line in drawing:
        body = line.strip()
        continued = body.startswith("│")
        body = body.lstrip("│▼ ")
        if not body:
            continue
        m = FOLDER.match(body)
        if m:
            folder = next((f for f in (f"gnndist/{m.group(1)}", m.group(1)) if (CHECKOUT / f).is_dir()), None)
            out.append((m.group(1) + "/", folder))
        elif not continued:
            folder = None
        for token in MODULE.findall(body):
            out.append((token, _resolve(token, folder)))
    return out


@cache
def _bound_names(path: str) -> frozenset[str]:
    """Every name a module binds or mentions in code (defs, classes, assignments, imports, identifiers, string
    constants such as a lazy-import table's keys, and what a ``from gnndist... import *`` brings), its docstring
    left out."""
    tree = ast.parse((CHECKOUT / path).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.ImportFrom) and node.names[0].name == "*":
            source = library_modules().get(node.module or "")
            names |= _bound_names(source) if source else set()
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)
    return frozenset(names)


def _dotted_problem(name: str, modules: dict[str, str]) -> str | None:
    """Why ``gnndist.a.b`` names nothing: its longest module prefix must bind its next part."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        prefix = ".".join(parts[:k])
        if prefix in modules:
            if k == len(parts) or parts[k] in _bound_names(modules[prefix]):
                return None
            return f"{prefix} ({modules[prefix]}) binds no {parts[k]!r}, and has no module of that name"
    return "no such module"


def test_every_path_in_layout_exists():
    gone = [p for p in layout_paths() if not _exists(p)]
    assert not gone, ("docs/layout.md names what is not in the tree: "
                      + "; ".join(f"{p} (delete its line, or write the new name)" for p in gone))


def _fix(path: str) -> str:
    """What docs/layout.md needs for ``path``: its line, or (a new package's ``__init__.py``) its folder's."""
    p = Path(path)
    if p.name == "__init__.py":
        return f"{path} (add the folder `{p.parent.name}/` under `{p.parent.parent}/`, with what the package holds)"
    return f"{path} (add `{p.name}` under its folder `{p.parent}/`, with the first line of its docstring)"


def test_every_library_module_is_in_layout():
    missing = [p for p in library_modules().values() if not _listed(p)]
    assert not missing, "library modules without a line in docs/layout.md: " + "; ".join(map(_fix, missing))


def test_every_docs_page_is_in_layout():
    pages = [p.relative_to(CHECKOUT).as_posix() for p in sorted((CHECKOUT / "docs").glob("*.md"))]
    missing = [p for p in pages if not _listed(p)]
    assert not missing, "docs/ pages without a line in docs/layout.md (under `docs/`): " + ", ".join(missing)


def test_every_module_in_architecture_exists():
    _, prose = _drawing_and_prose(ARCHITECTURE.read_text())
    gone = [f"{t} (in the drawing)" for t, path in drawing_modules() if path is None]
    gone += [f"{t} (in the text)" for t in sorted(set(MODULE.findall(prose))) if _resolve(t) is None]
    assert not gone, ("docs/architecture.md names modules that do not exist (delete them or write the new name): "
                      + ", ".join(gone))


def test_the_architecture_drawing_names_every_subpackage_and_top_level_module():
    drawn = {path for _, path in drawing_modules() if path}
    top = sorted(p for p in (CHECKOUT / "gnndist").iterdir()
                 if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and not p.name.startswith("_")))
    missing = [p.relative_to(CHECKOUT).as_posix() for p in top if p.relative_to(CHECKOUT).as_posix() not in drawn]
    assert not missing, ("docs/architecture.md's drawing leaves out (draw each in its layer's box: a folder as "
                         "`name/ ─ ...`, a module by its file name): " + ", ".join(missing))


@pytest.mark.parametrize("page", [LAYOUT, ARCHITECTURE], ids=lambda p: p.name)
def test_every_dotted_name_names_a_module_or_a_name_in_one(page):
    modules = library_modules()
    bad = [f"{n}: {why}" for n in sorted(set(DOTTED.findall(page.read_text())))
           if (why := _dotted_problem(n, modules))]
    assert not bad, f"docs/{page.name} names what gnndist does not have (write the new name): " + "; ".join(bad)


def test_every_module_a_package_docstring_lists_is_in_the_package():
    gone = []
    for path in library_modules().values():
        if path.endswith("__init__.py"):
            doc = ast.get_docstring(ast.parse((CHECKOUT / path).read_text())) or ""
            folder = path.removesuffix("__init__.py")
            gone += [f"{path}: {t}" for t in sorted(set(MODULE.findall(doc))) if not _exists(folder + t)]
    assert not gone, ("package docstrings list modules their package does not have (delete the line or write the "
                      "new name): " + "; ".join(gone))
