"""The documentation site (issue 35 item 4): ``mkdocs build --strict`` passes (a page naming a missing symbol or
linking a missing page fails it), and the pages written from the code list every registered view, option, command
and checkpoint layout. Skipped only where mkdocs is not installed (the ``test`` extra installs it, so CI runs it)."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import REPO

pytestmark = pytest.mark.slow  # (one mkdocs build: about 25 s here)

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocs_gen_files")
pytest.importorskip("mkdocstrings_handlers.python")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(REPO), "DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d",
                        str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    return out


def text_of(page: Path) -> str:
    """A built page's text (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8")))


def test_the_strict_build_writes_every_page(site):
    for page in ("index", "install/index", "guide/index", "methods/index", "benchmarks/index", "api/index",
                 "reference/cli/index", "reference/views/index", "reference/options/index",
                 "reference/families/index"):
        assert (site / f"{page}.html").is_file(), page
    api = text_of(site / "api" / "index.html")
    assert "Pipeline" in api and "attention_rollout" in api and "evaluate_views" in api  # from the docstrings


def test_the_views_page_lists_every_registered_view(site):
    from vitviz.views import view_registry

    text = text_of(site / "reference" / "views" / "index.html")
    for v in view_registry.all_views():
        assert re.search(rf"\b{re.escape(v.key)}\b", text), v.key
        assert v.title in text, v.title


def test_the_options_page_lists_every_option_and_its_flag(site):
    from vitviz.views.options import all_options, cli_flags

    text = text_of(site / "reference" / "options" / "index.html")
    for o in all_options():
        assert re.search(rf"\b{re.escape(o.name)}\b", text), o.name
    for f in cli_flags():
        assert f.flag in text, f.flag


def test_the_cli_page_has_every_command_and_its_flags(site):
    from vitviz.cli.commands import COMMANDS
    from vitviz.cli.run_flags import RUN_FLAGS

    text = text_of(site / "reference" / "cli" / "index.html")
    for name in COMMANDS:
        assert f"usage: vitviz {name}" in text, name
    for flag in RUN_FLAGS:
        assert flag in text, flag


def test_the_families_page_lists_every_checkpoint_layout_and_named_model(site):
    from vitviz.model.checkpoints.registry import FORMATS
    from vitviz.model.sources.catalog import HUB_MODELS, TORCHVISION_VITS

    text = text_of(site / "reference" / "families" / "index.html")
    for f in FORMATS:
        assert f.NAME in text and f.DESCRIPTION in text, f.NAME
    for m in HUB_MODELS:
        assert m.key in text and m.repo in text, m.key
    for name in TORCHVISION_VITS:
        assert name in text, name


def test_the_readme_is_short_and_links_pages_that_exist():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 250
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / target).is_file() or target.startswith("docs/reference/"), target


def test_every_page_is_in_the_nav():
    """A page written but not listed in mkdocs.yml's nav is only a note to mkdocs: here it fails."""
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:", 1)[1]
    listed = set(re.findall(r":\s*([\w./-]+\.md)\s*$", nav, flags=re.M))
    pages = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert pages - listed == set()
