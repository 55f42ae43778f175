"""The documentation site builds with ``mkdocs build --strict`` (what ``make docs`` runs).

Strict means: a link to a file or a heading that does not exist, a page in ``docs/`` left out of the nav, a nav
entry without its page, an API name (``::: gnndist...``) that no longer exists, or a docstring argument that is
not in the signature fails the build. The README is the home page and the files outside ``docs/`` the pages link
to are part of the site (``docs/hooks.py``), so their links are checked too.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).parent / "mkdocs"  # the console script of this environment

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or not MKDOCS.exists(),
                                reason="mkdocs is not installed (pip install -e '.[dev]' or '.[docs]' installs it)")


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor, on stderr
    return subprocess.run([str(MKDOCS), "build", "--strict", "-f", str(config), "-d", str(site)], cwd=config.parent,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_site_builds_strict(tmp_path):
    r = _build(CHECKOUT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, r.stderr[-4000:]
    site = tmp_path / "site"
    pages = {p.relative_to(site).as_posix() for p in site.rglob("index.html")}
    assert {"index.html", "api/ranks/index.html", "api/layers/index.html", "repo/benchmarks/index.html"} <= pages, pages
    assert "gnndist.launcher.launch" in (site / "api" / "ranks" / "index.html").read_text()  # the docstrings came


def _small_site(tmp_path: Path, readme: str) -> Path:
    """A copy of the site's configuration and hooks around one page, the README."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    shutil.copy(CHECKOUT / "docs" / "hooks.py", root / "docs" / "hooks.py")
    (root / "docs" / "page.md").write_text("# A page\n\n## A heading\n\nBack [home](../README.md).\n")
    (root / "README.md").write_text(readme)
    config = (CHECKOUT / "mkdocs.yml").read_text().split("\nnav:")[0]  # the nav is the last key
    (root / "mkdocs.yml").write_text(config + "\nnav:\n  - index.md\n  - page.md\n")
    (root / "gnndist").mkdir()  # the hooks lay the packages out for the API reference
    for name in ("partition", "kernels", "datasets"):
        (root / name).mkdir()
    return root / "mkdocs.yml"


# One build holds a good link and one of each broken kind (mkdocs reports every warning before strict aborts):
# each broken link is named, and only those three warn (four builds of one link each took four times as long).
BROKEN = {"[gone](docs/gone.md)": "docs/gone.md", "[no heading](docs/page.md#no-such-heading)": "no-such-heading",
          "[outside docs](benchmarks/README.md)": "benchmarks/README.md"}


def test_a_broken_link_fails_the_build(tmp_path):
    links = ["[the page](docs/page.md#a-heading)", *BROKEN]
    r = _build(_small_site(tmp_path, "# gnndist\n\n" + "".join(f"See {link}.\n\n" for link in links)),
               tmp_path / "site")
    assert r.returncode != 0, r.stderr[-3000:]
    for link, found in BROKEN.items():
        assert found in r.stderr, (link, r.stderr[-3000:])
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == len(BROKEN), r.stderr[-3000:]  # one each: the good link does not warn
