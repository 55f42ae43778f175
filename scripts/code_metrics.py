"""Structure figures of the library (issue 22's before/after table).

    .venv/bin/python scripts/code_metrics.py [--json]

Prints: lines of ``Trainer.fit``; functions over 60 lines; ``getattr``/``hasattr`` calls
whose object names a strategy or a graph; assignments to a graph's attributes outside
``gnndist/graph.py``; ``os.environ`` reads outside the entry points; import circles among
module-level imports; lines of non-test code per package.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"gnndist": "gnndist", "gnndist.partition": "partition", "gnndist.kernels": "kernels",
            "gnndist.datasets": "datasets"}
ENTRY_POINTS = {"gnndist/cli.py", "gnndist/launcher.py", "gnndist/testing.py", "kernels/settings.py",
                "kernels/testing.py"}  # gnndist.launch, the Python API's entry point, is in launcher.py
GRAPHISH = ("graph", "strategy", "strat", "part", "self.graph", "self.strategy", "g.strategy", "s")


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every library module."""
    out = {}
    for pkg, folder in PACKAGES.items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            rel = f.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([pkg, *parts]) if parts else pkg
            if pkg == "gnndist" and parts and parts[0] in ("partition", "kernels", "datasets"):
                continue
            out[name] = f
    return out


def _src(expr: ast.AST) -> str:
    return ast.unparse(expr)


def function_lengths(mods: dict[str, Path]) -> list[tuple[str, int]]:
    long = []
    for name, f in mods.items():
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    long.append((f"{f.relative_to(ROOT)}:{node.lineno} {node.name}", n))
    return sorted(long, key=lambda t: -t[1])


def fit_lines(mods: dict[str, Path]) -> int | None:
    for f in mods.values():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef) and node.name == "Trainer":
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "fit":
                        return item.end_lineno - item.lineno + 1
    return None


def probes(mods: dict[str, Path]) -> list[str]:
    """getattr/hasattr on an object whose name says strategy or graph."""
    hits = []
    for f in mods.values():
        for node in ast.walk(ast.parse(f.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr")):
                obj = _src(node.args[0]) if node.args else ""
                if any(w in obj.lower() for w in ("graph", "strateg")) or obj in ("g", "s", "self.options[best]"):
                    hits.append(f"{f.relative_to(ROOT)}:{node.lineno} {_src(node)}")
    return hits


def graph_assignments(mods: dict[str, Path]) -> list[str]:
    """``<graph>.attr = ...`` outside gnndist/graph.py (the rank's part)."""
    hits = []
    for f in mods.values():
        if f.relative_to(ROOT).as_posix() in ("gnndist/graph.py",):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for el in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if isinstance(el, ast.Attribute):
                        base = _src(el.value)
                        if base in ("graph", "g", "self.graph", "trainer.graph") or base.endswith(".graph"):
                            hits.append(f"{f.relative_to(ROOT)}:{node.lineno} {_src(el)} =")
    return hits


def env_reads(mods: dict[str, Path]) -> list[str]:
    hits = []
    for f in mods.values():
        rel = f.relative_to(ROOT).as_posix()
        if rel in ENTRY_POINTS:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Subscript) and _src(node.value) == "os.environ":
                hits.append(f"{rel}:{node.lineno} {_src(node.slice)}")
            if isinstance(node, ast.Call) and _src(node.func) in ("os.environ.get", "os.getenv", "env.get"):
                hits.append(f"{rel}:{node.lineno} {_src(node.args[0]) if node.args else ''}")
    return hits


def import_graph(mods: dict[str, Path], lazy: bool = False) -> dict[str, set[str]]:
    """Module -> library modules it imports at module level (with ``lazy``: inside functions too)."""
    names = set(mods)
    edges: dict[str, set[str]] = {}
    for name, f in mods.items():
        is_pkg = f.name == "__init__.py"
        tree = ast.parse(f.read_text())
        deps: set[str] = set()
        typing_only = {id(n) for node in ast.walk(tree)
                       if isinstance(node, ast.If) and "TYPE_CHECKING" in _src(node.test) for n in ast.walk(node)}
        for node in (list(ast.walk(tree)) if lazy else tree.body):
            stmts = [node]
            if id(node) in typing_only or (isinstance(node, ast.If) and "TYPE_CHECKING" in _src(node.test)):
                continue
            if isinstance(node, ast.Try):
                stmts = node.body
            for st in stmts:
                if isinstance(st, ast.Import):
                    deps |= {a.name for a in st.names}
                elif isinstance(st, ast.ImportFrom):
                    if st.level:
                        base = name.split(".") if is_pkg else name.split(".")[:-1]
                        base = base[: len(base) - st.level + 1]
                        mod = ".".join(base + ([st.module] if st.module else []))
                    else:
                        mod = st.module or ""
                    subs = {f"{mod}.{a.name}" for a in st.names}
                    if not subs <= names:  # `from pkg import submodule` does not import pkg's own names
                        deps.add(mod)
                    deps |= subs
        edges[name] = {d for d in deps if d in names and d != name}
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    # a package importing its own submodules is not a circle of two ideas: drop pkg <-> pkg.sub pairs
    return [c for c in out if not (len(c) == 2 and c[1].startswith(c[0] + "."))]


def lines_per_package() -> dict[str, int]:
    out = {}
    for folder in ("gnndist", "partition", "kernels", "datasets", "benchmarks", "scripts", "examples"):
        out[folder] = sum(len(f.read_text().splitlines()) for f in (ROOT / folder).rglob("*.py"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    mods = modules()
    res = {"fit_lines": fit_lines(mods), "functions_over_60": function_lengths(mods), "probes": probes(mods),
           "graph_assignments": graph_assignments(mods), "env_reads": env_reads(mods),
           "import_circles": circles(import_graph(mods)),
           "import_circles_lazy": circles(import_graph(mods, lazy=True)), "lines": lines_per_package()}
    if args.json:
        print(json.dumps(res))
        return
    print(f"Trainer.fit: {res['fit_lines']} lines")
    print(f"functions over 60 lines: {len(res['functions_over_60'])}")
    for name, n in res["functions_over_60"]:
        print(f"  {n:4d}  {name}")
    for key in ("probes", "graph_assignments", "env_reads"):
        print(f"{key}: {len(res[key])}")
        for h in res[key]:
            print(f"  {h}")
    print(f"import circles: {len(res['import_circles'])}")
    for c in res["import_circles"]:
        print("  " + " <-> ".join(c))
    print(f"import circles counting imports inside functions: {len(res['import_circles_lazy'])}")
    for c in res["import_circles_lazy"]:
        print("  " + " <-> ".join(c))
    print("lines: " + ", ".join(f"{k} {v}" for k, v in res["lines"].items()))


if __name__ == "__main__":
    main()
