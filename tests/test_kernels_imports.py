"""The kernels package imports without circles and reads no environment variable outside ``settings.py``.

Every ``import`` statement counts, also one inside a function (a lazy import is still a circle):
``a -> b`` when module ``a`` names module ``b`` (``from . import x`` names ``x`` if ``x`` is a module,
else the package). The dispatcher's by-name loading of implementations (``importlib``) is a
registry lookup, not an import statement, and does not count.
"""

import ast
from pathlib import Path

import gnndist.kernels

ROOT = Path(gnndist.kernels.__file__).parent
PACKAGE = "gnndist.kernels"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([PACKAGE, *parts])] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules its import statements name."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles_in_kernels():
    graph = import_graph()
    assert f"{PACKAGE}.spmm.triton" in graph and graph[f"{PACKAGE}.sddmm.triton"]  # the walk sees the files
    assert circles(graph) == []


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _environment_keys(tree: ast.AST) -> list[str | None]:
    """The variable named by every ``os.environ`` / ``os.getenv`` use (None where it is not a literal)."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    keys = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
                and node.attr in ("environ", "getenv")):
            continue
        use, key = parents.get(node), None
        if isinstance(use, ast.Attribute) and isinstance(parents.get(use), ast.Call):  # os.environ.get(KEY, ...)
            use = parents[use]
        if isinstance(use, ast.Call) and use.args:  # os.getenv(KEY) / os.environ.get(KEY)
            key = use.args[0]
        elif isinstance(use, ast.Subscript):  # os.environ[KEY]
            key = use.slice
        keys.append(key.value if isinstance(key, ast.Constant) else None)
    return keys


def test_only_settings_reads_the_environment():
    """User overrides are read by ``settings_from_env`` alone; ``TRITON_INTERPRET`` is Triton's own variable."""
    found = {}
    for name, path in _modules().items():
        keys = _environment_keys(ast.parse(path.read_text(), str(path)))
        if name != f"{PACKAGE}.settings" and set(keys) - {"TRITON_INTERPRET"}:
            found[name] = keys
    assert found == {}
    probe = "import os\nos.environ.get('A'); os.environ['B']; os.getenv('C'); e = os.environ"
    assert sorted(_environment_keys(ast.parse(probe)), key=str) == ["A", "B", "C", None]


def test_nn_imports_only_the_layers_below_it():
    """``gnndist.nn`` (layers, models, their registry) stands on kernels, comm, the cost model and errors only:
    not on the config, the strategies or training (a model's preset is data that :mod:`gnndist.presets` applies)."""
    below = ("gnndist.nn", "gnndist.kernels", "gnndist.dist.comm", "gnndist.cost", "gnndist.errors")
    named = set()
    for path in sorted(Path(gnndist.kernels.__file__).parent.parent.joinpath("nn").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gnndist"):
                named.add((path.name, node.module))
            elif isinstance(node, ast.Import):
                named.update((path.name, a.name) for a in node.names if a.name.startswith("gnndist"))
    outside = sorted((f, m) for f, m in named if not any(m == b or m.startswith(b + ".") for b in below))
    assert not outside, f"gnndist.nn imports above its layer: {outside}"
