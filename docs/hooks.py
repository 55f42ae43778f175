"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``; ``make docs`` builds it).

The markdown is written for GitHub: the README links ``docs/strategies.md``, a page links
``../benchmarks/README.md``. The site is built from the same files, unchanged:

* the README is the home page (``index.md``);
* every file of the checkout outside ``docs/`` that a page links to (``benchmarks/README.md``, the result
  pages, their CSV and PNG files) is part of the site under ``repo/<its path>``, found by following links
  from the pages;
* links are rewritten to those places, so ``mkdocs build --strict`` checks each one: a link to a file
  that does not exist is left as written and fails the build;
* mkdocstrings reads gnndist's packages laid out as installed (``partition/`` is ``gnndist.partition``,
  setup.cfg's ``package_dir``): a tree of links under ``build/api-src``; the docstrings' Sphinx roles
  (``:class:`~gnndist.graph.DistGraph` ``) show as code (``DistGraph``): :class:`SphinxRoles`, a griffe
  extension that mkdocs.yml names.
"""

from __future__ import annotations

import posixpath
import re
import shutil
from pathlib import Path

import griffe
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

MOUNT = "repo"  # where files of the checkout outside docs/ live in the site
SUBPACKAGES = ("partition", "kernels", "datasets")  # top-level folders installed as gnndist.<name>
_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")
_LINK = re.compile(r"(\]\()([^)\s]+)(\))")  # [text](target), ![alt](target)
_FENCE = re.compile(r"^\s*```")

_mounted: dict[str, str] = {}  # checkout path -> site path, of the files outside docs/
_root = Path(".")


def _root_of(config) -> Path:
    return Path(config.config_file_path).resolve().parent


@event_priority(100)  # before mkdocstrings reads its handler's paths
def on_config(config):
    """The installed layout for mkdocstrings: build/api-src/gnndist/ links gnndist/'s entries and the subpackages."""
    global _root
    _root = _root_of(config)
    tree = _root / "build" / "api-src"
    shutil.rmtree(tree, ignore_errors=True)
    package = tree / "gnndist"
    package.mkdir(parents=True)
    for entry in (_root / "gnndist").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name in SUBPACKAGES:
        (package / name).symlink_to(_root / name)
    return config


def _repo_path(page_repo_path: str, target: str) -> str | None:
    """The checkout path a relative link of a page points to (no anchor), or None for a URL, an anchor or
    a path outside the checkout."""
    if not target or target.startswith(("#", "/")) or re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return None
    path = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), target.split("#", 1)[0]))
    return None if path.startswith("..") else path


def _links(text: str) -> list[str]:
    """The link targets of a markdown text outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out += [m.group(2) for m in _LINK.finditer(line)]
    return out


def _site_path(repo_path: str) -> str | None:
    """Where a file of the checkout is in the site; None where it is not (a link to it stays as written)."""
    if repo_path.startswith("docs/") and (_root / repo_path).exists():
        return repo_path[len("docs/"):]
    return _mounted.get(repo_path)


def _repo_of(src_uri: str) -> str:
    """The checkout path of a page of the site."""
    for repo, site in _mounted.items():
        if site == src_uri:
            return repo
    return f"docs/{src_uri}"


def on_files(files: Files, config) -> Files:
    """Mount the README as the home page and, following links, every file outside docs/ the pages link to."""
    _mounted.clear()
    _mounted["README.md"] = "index.md"
    files.append(File.generated(config, "index.md", abs_src_path=str(_root / "README.md")))
    queue = ["README.md", *(f"docs/{f.src_uri}" for f in files.documentation_pages() if f.src_uri != "index.md")]
    while queue:
        page = queue.pop()
        if not page.endswith(".md"):
            continue
        for target in _links((_root / page).read_text()):
            path = _repo_path(page, target)
            if path is None or path.startswith("docs/") or path in _mounted or not (_root / path).is_file():
                continue
            _mounted[path] = f"{MOUNT}/{path}"
            files.append(File.generated(config, _mounted[path], abs_src_path=str(_root / path)))
            queue.append(path)
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Each link to a file of the checkout, rewritten to where that file is in the site."""
    here = _repo_of(page.file.src_uri)
    site_dir = posixpath.dirname(page.file.src_uri)

    def rewrite(m: re.Match) -> str:
        target = m.group(2)
        path = _repo_path(here, target)
        site = _site_path(path) if path is not None else None
        if site is None:
            return m.group(0)
        anchor = "#" + target.split("#", 1)[1] if "#" in target else ""
        return f"{m.group(1)}{posixpath.relpath(site, site_dir or '.')}{anchor}{m.group(3)}"

    out, fenced = [], False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        out.append(line if fenced else _LINK.sub(rewrite, line))
    return "\n".join(out)


class SphinxRoles(griffe.Extension):
    """``:class:`~a.b.C` `` in a docstring becomes ```C` ``, ``:func:`a.f` `` becomes ```a.f` ``."""

    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(
                lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", obj.docstring.value)
