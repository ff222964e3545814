"""The user documentation against the code: the README's length, its links, an example of
every command, and a section of `docs/benchmarks.md` for every script in `bench/`.

Commands are read from the `NAME` constant of each `paraplan/commands/` module by parsing
(no import), so the check costs no torch start-up.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 250
"""Length limit of the README (issue 31: a README for users; the manual is in docs/)."""
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
"""A markdown link or image; group 1 is its target."""


def command_names() -> list[str]:
    """The `NAME` of every command module of `paraplan/commands/`."""
    names = []
    for path in sorted((ROOT / "paraplan" / "commands").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "NAME" for t in node.targets)
                and isinstance(node.value, ast.Constant)
            ):
                names.append(node.value.value)
    return names


def local_targets(text: str) -> list[str]:
    """Link targets that are not web addresses or anchors."""
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"[a-z]+://|#|mailto:", t)]


def test_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_readme_links_stay_inside_the_repository() -> None:
    outside = [
        t
        for t in local_targets(README.read_text())
        if not (ROOT / t).resolve().is_relative_to(ROOT)
    ]
    assert not outside, f"README.md links outside the repository: {outside}"


def test_readme_shows_every_command() -> None:
    text = README.read_text()
    names = command_names()
    assert len(names) >= 10, names
    missing = [n for n in names if f"$ paraplan {n}" not in text]
    assert not missing, f"README.md has no example of: {missing}"


def test_benchmarks_doc_covers_every_script() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "bench").glob("*.py"))
    missing = [s for s in scripts if f"`{s}`" not in text]
    assert not missing, f"docs/benchmarks.md does not describe: {missing}"


def test_docs_link_only_to_existing_files_or_the_manual() -> None:
    manual = {p.name for p in (ROOT / "docs").glob("*.md")}
    broken = []
    for doc in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in local_targets(doc.read_text()):
            path = (doc.parent / target.split("#")[0]).resolve()
            if not path.exists() and not (path.parent == ROOT / "docs" and path.suffix == ".md"):
                broken.append(f"{doc.name}: {target}")
    assert not broken, f"links to missing files: {broken}; manual pages: {sorted(manual)}"
