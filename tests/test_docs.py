"""The user's guide stays a guide: short, every link it gives leads somewhere, no commit hashes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_a_short_guide_without_commit_hashes():
    assert len(README) <= 12_000, f"README.md has {len(README)} characters (at most 12,000: the record goes in docs/)"
    hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", README) if re.search(r"[a-f]", h) and re.search(r"[0-9]", h)]
    assert not hashes, f"commit hashes in README.md: {hashes}"


def test_every_link_of_the_readme_exists():
    links = [l.split("#")[0] for l in re.findall(r"\]\(([^)]+)\)", README) if not l.startswith("http")]
    missing = [l for l in links if not (ROOT / l).exists()]
    assert links and not missing, f"README.md links to missing files: {missing}"
