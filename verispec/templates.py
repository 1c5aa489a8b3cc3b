"""The files a user starts from, shipped in the wheel: ``verispec template NAME`` prints one.

The examples live in the repository's examples/ folder (run by its tests); verispec/data/templates/
holds symlinks to them, which the wheel build follows, so a pip-installed verispec carries the same
bytes with no second copy to drift. The CI workflow exists only here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from verispec.reference.errors import TemplateError as TemplateError

TEMPLATE_DIR = Path(__file__).resolve().parent / "data" / "templates"



@dataclass(frozen=True)
class Template:
    name: str
    filename: str
    what: str


TEMPLATES: tuple[Template, ...] = (
    Template("github-actions", "github-actions.yml", "CI workflow: a matrix of shards, their reports as artifacts, a merge job"),
    Template("law-only-verifier", "law_only_verifier.py", "a NumPy verifier with its own randomness (verispec check --law-only)"),
    Template("external-verifier", "external_verifier.py", "a plain-Python verifier speaking the wire protocol (--verifier-cmd)"),
    Template("transformers-decoder", "transformers_decoder.py", "check-decoder engine factories for transformers (--engine)"),
    Template("llama-cpp-decoder", "llama_cpp_decoder.py", "check-decoder engine factory for llama-cpp-python (--engine)"),
)


def template(name: str) -> Template:
    for entry in TEMPLATES:
        if entry.name == name:
            return entry
    raise TemplateError(f"unknown template {name!r}; known: {', '.join(t.name for t in TEMPLATES)}")


def template_text(name: str) -> str:
    """The template's text (TemplateError for an unknown name or a broken installation)."""
    path = TEMPLATE_DIR / template(name).filename
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"template {name!r} is missing from this installation ({path}): {exc.strerror}") from None
