"""README.md is a front page: short, its two commands first, every link leading somewhere.

The reference content lives in the documentation site under docs/ (mkdocs.yml), whose
own links and anchors `mkdocs build --strict` checks in scripts/test.sh; the README is
outside the site, so its links are checked here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc (MkDocs) and GitHub both give these headings."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", text))


def anchors(page: Path) -> set[str]:
    text = page.read_text()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    commands = re.findall(r"```sh\n(.+?)\n```", text)
    assert commands[:2] == [
        "bash scripts/venv.sh && .venv/bin/tepat serve --sandbox",
        "bash scripts/test.sh",
    ]


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = [m["target"] for m in LINK.finditer(README.read_text())]
    relative = [t for t in links if not re.match(r"^[a-z]+:", t)]
    assert len(relative) > 10
    for target in relative:
        path, _, anchor = target.partition("#")
        page = ROOT / path
        assert page.exists(), f"README links {target}: no such file"
        if anchor:
            assert anchor in anchors(page), f"README links {target}: no such heading"


def test_slugs_match_the_site_s() -> None:
    assert slug("The operator dashboard") == "the-operator-dashboard"
    assert slug("Events: `POST /v1/events`") == "events-post-v1events"
    assert slug("E-mail (SMTP)") == "e-mail-smtp"
