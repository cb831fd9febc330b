"""Every relative link in the user documents points to a file that exists (and, for a
``page.md#anchor`` link, to a heading of that page): README.md, docs/*.md, scripts/README.md
and the results/ history pages. Links inside code (fenced blocks, inline code) are text, not
links, and are not checked."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted({ROOT / "README.md", ROOT / "scripts" / "README.md", *(ROOT / "docs").glob("*.md"),
                *(ROOT / "results").rglob("HISTORY.md")})

_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _unfenced(text: str) -> str:
    """The text outside fenced code blocks (their lines left empty)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"\s*(```+|~~~+)", line)
        if m:
            fence = None if fence and m.group(1)[0] == fence[0] else (fence or m.group(1))
            out.append("")
            continue
        out.append("" if fence else line)
    return "\n".join(out)


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans."""
    return re.sub(r"(`+).*?\1", "", _unfenced(text))


def links(page: Path) -> list[str]:
    return _LINK.findall(_prose(page.read_text()))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to '-'."""
    h = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)
    return re.sub(r"[^\w\- ]", "", h).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", _unfenced(page.read_text()), re.M)}


def broken(page: Path) -> list[str]:
    bad = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target} (no {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(f"{target} (no heading '#{fragment}' in {dest.relative_to(ROOT)})")
    return bad


def test_the_link_reader_sees_links_and_skips_code(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# A `b` c\n[x](here.md) ![](img.png) `[no](code.md)`\n```\n[no](fence.md)\n```\n"
                    "[y](other.md#a-b-c) [z](https://example.com)\n")
    assert links(page) == ["here.md", "img.png", "other.md#a-b-c", "https://example.com"]
    assert anchors(page) == {"a-b-c"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken(page) == []
