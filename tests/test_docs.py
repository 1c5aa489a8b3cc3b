"""The README and docs/ stay true and navigable: size, links, headings, and the commands they show.

What this checks: README.md is at most 200 lines and opens with the newcomer's two commands;
every relative link in README.md and docs/**/*.md names a file or folder that exists, and a
`#anchor` into a markdown file names one of its headings (GitHub's slug rule); no README heading is
named after a clock time, and neither the README nor docs/ cites a work item ("issue N") or
a working session; every `verispec COMMAND --flag` in a shell block exists in the argparse tree of
`verispec --help` (built in-process, no model loaded); the README's performance table carries the
numbers of the saved measurements it cites. What it cannot check: that prose is true of the code
(review does that), or links to the web.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab import results
from verispec.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [README, *DOCS]

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *$", re.M)
CLOCK = re.compile(r"\b\d{1,2}:\d{2}\b")


def _prose(text: str) -> str:
    """The text outside fenced code blocks (links and headings live there)."""
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m.group(2)) for m in HEADING.finditer(_prose(path.read_text()))}


def _links(path: Path) -> Iterator[str]:
    for target in LINK.findall(_prose(path.read_text())):
        if not re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not checked here
            yield target


def test_readme_is_at_most_200_lines_and_opens_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines"
    first_block = FENCE.search(README.read_text())
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(0).splitlines()[1:-1]]
    assert commands == ["make demo", "make test"]
    assert README.read_text().index(first_block.group(0)) < 40, "the two commands come first"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        file_part, _, anchor = target.partition("#")
        resolved = (page.parent / file_part).resolve() if file_part else page
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_moved_readme_section_is_reachable_from_the_docs_index() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    linked = {(ROOT / "docs" / t.partition("#")[0]).resolve() for t in _links(ROOT / "docs" / "index.md")}
    for page in DOCS:
        if page.parent.name != "results":
            assert page.resolve() in linked or page.name == "index.md", f"docs/index.md does not link {page.name}"
    assert "Where the former README sections are" in index


def test_readme_has_no_clock_time_headings_and_docs_cite_no_work_items() -> None:
    readme = README.read_text()
    clock = [h for _, h in HEADING.findall(_prose(readme)) if CLOCK.search(h)]
    assert not clock, f"README headings named after clock times: {clock}"
    assert not re.search(r"\bsessions?\b", readme, re.I), "the README says 'session'"
    for page in PAGES:
        found = re.findall(r"\bissues? \d+", page.read_text(), re.I)
        assert not found, f"{page.relative_to(ROOT)} cites {found}: state the requirement instead"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


INVOCATION = re.compile(r"(?:^|[\s;:$`])verispec ([a-z][\w-]*)((?: +[^|;>&`]*)?)")


def _words(match: re.Match[str]) -> list[str]:
    """An invocation as words; `[--x]` options and `a|b` alternatives count as shown flags."""
    rest = re.sub(r"[\[\]|]", " ", match.group(2))
    return [match.group(1), *shlex.split(rest)]


def _shell_commands(page: Path) -> Iterator[list[str]]:
    """Each `verispec ...` invocation the page shows: in sh/yaml blocks (continuations joined,
    comments dropped) and in inline code spans."""
    text = page.read_text()
    for block in FENCE.findall(text):
        if not block.startswith(("```sh", "```yaml")):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            yield from (_words(m) for m in INVOCATION.finditer(line.split(" #")[0]))
    for span in re.findall(r"`(verispec [^`]+)`", _prose(text)):
        yield from (
            _words(m) for m in INVOCATION.finditer(" ".join(span.replace("|", " ").split()))
        )  # a|b: alternatives


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_shown_exist_in_verispec_help(page: Path) -> None:
    commands = _subcommands(build_parser())
    unknown = []
    for words in _shell_commands(page):
        name, rest = words[0], words[1:]
        if name not in commands:
            unknown.append(f"verispec {name}")
            continue
        parser = commands[name]
        nested = _subcommands(parser)
        if nested and rest and not rest[0].startswith("-"):
            if rest[0] not in nested:
                unknown.append(f"verispec {name} {rest[0]}")
                continue
            parser, rest = nested[rest[0]], rest[1:]
        flags = {w.split("=")[0] for w in rest if w.startswith("--")}
        unknown += [f"verispec {name} {flag}" for flag in sorted(flags - _options(parser))]
    assert not unknown, f"{page.relative_to(ROOT)} shows commands `verispec --help` does not know: {unknown}"


def test_the_command_check_sees_a_flag_that_does_not_exist(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```sh\nverispec check --verifier m:f --no-such-flag\nverispec frobnicate\n```\n")
    words = list(_shell_commands(page))
    assert words == [["check", "--verifier", "m:f", "--no-such-flag"], ["frobnicate"]]
    assert "--no-such-flag" not in _options(_subcommands(build_parser())["check"])


def test_readme_performance_table_is_the_saved_measurements() -> None:
    readme = README.read_text()
    for row in results.headline_table():
        assert row in readme, (
            f"README's performance table lacks (or changed) {row!r}: copy it from lab.results.headline_table()"
        )
