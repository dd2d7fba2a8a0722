"""The docs build as a site with no broken link or anchor, and stay short enough to finish.

`mkdocs build --strict` (mkdocs.yml) fails on a link to a missing page or anchor, and on a page
left out of the nav. The README lies outside MkDocs' docs folder, and the report names doc
sections by anchor (templates/report_method.md.j2): both are checked here against the ids of
the built pages. GitHub renders the same files, so each heading's anchor must be the one
GitHub gives it too."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

# Issue 40: a newcomer can finish the docs. Every Markdown file of docs/ and the README.
MOST_WORDS = 35_000
README_MOST_WORDS = 800

HEADING = re.compile(r'<h([1-6]) id="([^"]+)">(.*?)</h\1>', re.DOTALL)
ID = re.compile(r'\bid="([^"]+)"')


def words(path: Path) -> int:
    """What `wc -w` counts: runs of characters between whitespace."""
    return len(path.read_text(encoding="utf-8").split())


def doc_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def ids(site: Path, page: str) -> set[str]:
    """The anchors of a built page, by its file name under docs/."""
    return set(ID.findall((site / page.removesuffix(".md") / "index.html").read_text()))


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def test_the_docs_build_with_mkdocs_strict(site: Path) -> None:
    assert (site / "report" / "index.html").is_file()


def test_the_docs_stay_within_their_word_counts() -> None:
    counts = {path.relative_to(REPO).as_posix(): words(path) for path in doc_pages()}
    assert counts["README.md"] < README_MOST_WORDS, counts["README.md"]
    assert sum(counts.values()) <= MOST_WORDS, sorted(counts.items(), key=lambda kv: -kv[1])


def test_the_word_count_is_what_wc_counts(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# A page\n\nTwo  words,\tthen `code --flag`.\n| a | b |\n")
    assert words(page) == 13  # wc -w: every run between whitespace, table pipes included


def test_every_link_of_the_readme_reaches_a_page_and_anchor(site: Path) -> None:
    links = re.findall(r"\]\((docs/[\w-]+\.md)(?:#([\w-]+))?\)", (REPO / "README.md").read_text())
    assert len(links) > 10, "the README links no docs: the pattern is wrong"
    for path, anchor in links:
        assert (REPO / path).is_file(), path
        if anchor:
            assert anchor in ids(site, Path(path).name), f"README: {path}#{anchor}"


def test_every_docs_section_the_report_names_exists(site: Path) -> None:
    templates = "".join(p.read_text() for p in sorted((REPO / "templates").glob("report*.j2")))
    calls = re.findall(r'call method\("[^"]+", "([\w-]+)"(?:, "([\w-]+\.md)")?\)', templates)
    assert len(calls) >= 8, "the report names no docs section: the pattern is wrong"
    for anchor, page in calls:
        assert anchor in ids(site, page or "report.md"), f"{page or 'report.md'}#{anchor}"


def test_every_heading_has_the_anchor_github_gives_it(site: Path) -> None:
    differ = []
    for page in sorted((REPO / "docs").glob("*.md")):
        built = (site / page.stem / "index.html").read_text()
        for _, anchor, inner in HEADING.findall(built):
            text = html.unescape(re.sub(r"<[^>]+>", "", inner))
            github = github_slug(text)
            if github != re.sub(r"_\d+$", "", anchor):
                differ.append(f"{page.name}: {text!r} is #{anchor} here, #{github} on GitHub")
    assert differ == []
