"""The documentation site: every page exists and `mkdocs build --strict` has no warnings.

The build runs the venv's mkdocs (installed by the `dev` extra, as `make test` does) in a
subprocess; the API reference is generated from the docstrings by mkdocstrings, so a
docstring griffe cannot parse fails here.
"""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.test_docstrings import MODULES, PUBLIC, SUBPACKAGES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _nav_pages(entries):
    for entry in entries:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            if isinstance(value, list):
                yield from _nav_pages(value)
            else:
                yield value


@pytest.fixture(scope="module")
def config():
    with open(ROOT / "mkdocs.yml", encoding="utf-8") as file:
        return yaml.safe_load(file)


def test_every_page_in_the_nav_exists(config):
    pages = list(_nav_pages(config["nav"]))
    assert "index.md" in pages and "paper.md" in pages and "results.md" in pages
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert not missing, f"mkdocs.yml's nav names pages that do not exist: {missing}"


def test_every_page_is_in_the_nav(config):
    pages = set(_nav_pages(config["nav"]))
    orphans = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")
                     if str(p.relative_to(DOCS)) not in pages)
    assert not orphans, f"add these pages to the nav of mkdocs.yml: {orphans}"


def test_every_subpackage_has_an_api_page():
    for name in SUBPACKAGES + MODULES:
        page = DOCS / "api" / f"{name}.md"
        assert page.is_file(), f"missing API page {page}"
        assert f"::: keras_transformer.{name}" in page.read_text(encoding="utf-8")


def test_results_page_has_the_benchmark_markers():
    text = (DOCS / "results.md").read_text(encoding="utf-8")
    start, end = text.find("<!-- bench:start -->"), text.find("<!-- bench:end -->")
    assert 0 <= start < end, "docs/results.md needs the bench:start and bench:end markers"


def _rendering():
    path = DOCS / "docstring_rendering.py"
    spec = importlib.util.spec_from_file_location("docstring_rendering", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fence_doctests_wraps_doctest_runs():
    fence_doctests = _rendering().fence_doctests
    text = "Example:\n>>> x = 1\n>>> x\n1\n\nAfter.\n    >>> y\n    2\nEnd."
    assert fence_doctests(text) == (
        "Example:\n\n```pycon\n>>> x = 1\n>>> x\n1\n```\n\nAfter.\n\n"
        "    ```pycon\n    >>> y\n    2\n    ```\nEnd."
    )
    assert fence_doctests("No examples.") == "No examples."


def test_call_arguments_become_list_items():
    text = ("Call arguments:\n    query: `(B, T, D)`.\n    mask: boolean, broadcast\n"
            "        to `(B, T, S)`.\n\nReturns:\n    x: not an argument.")
    assert _rendering().list_call_arguments(text) == (
        "Call arguments:\n    - `query`: `(B, T, D)`.\n    - `mask`: boolean, broadcast\n"
        "        to `(B, T, S)`.\n\nReturns:\n    x: not an argument."
    )


def _mkdocs():
    executable = Path(sys.executable).with_name("mkdocs")
    if executable.exists():
        return [str(executable)]
    return [sys.executable, "-m", "mkdocs"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site_dir = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "KERAS_BACKEND": "tensorflow"}
    try:
        result = subprocess.run(
            _mkdocs() + ["build", "--strict", "--site-dir", str(site_dir)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )
    except FileNotFoundError:
        pytest.fail("mkdocs is not installed: run `pip install -e '.[dev]'` (or `make test`).")
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{output}"
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert not warnings, "mkdocs build warnings:\n" + "\n".join(warnings)
    return site_dir


def test_docs_build_strict_without_warnings(site):
    for page in ("index.html", "paper/index.html", "results/index.html",
                 "guides/decoding/index.html", "api/layers/index.html"):
        assert (site / page).is_file(), f"{page} was not built"


def test_api_reference_documents_every_public_object(site):
    anchors = set()
    for page in (site / "api").rglob("*.html"):
        anchors.update(re.findall(r'id="(keras_transformer\.[\w.]+)"', page.read_text("utf-8")))
    names = {anchor.rsplit(".", 1)[-1] for anchor in anchors}
    missing = sorted(name for name in PUBLIC if name.rsplit(".", 1)[-1] not in names)
    assert not missing, f"public objects missing from the API reference: {missing}"


def test_doctests_render_as_code(site):
    html = (site / "api" / "layers" / "index.html").read_text("utf-8")
    assert "&gt;&gt;&gt;" in html and "<blockquote>" not in html
