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
    Template(
        "github-actions",
        "github-actions.yml",
        "CI workflow: a matrix of shards, their reports as artifacts, a merge job",
    ),
    Template(
        "law-only-verifier",
        "law_only_verifier.py",
        "a NumPy verifier with its own randomness (verispec check --law-only)",
    ),
    Template(
        "external-verifier",
        "external_verifier.py",
        "a plain-Python verifier speaking the wire protocol (--verifier-cmd)",
    ),
    Template(
        "transformers-decoder", "transformers_decoder.py", "check-decoder engine factories for transformers (--engine)"
    ),
    Template(
        "llama-cpp-decoder", "llama_cpp_decoder.py", "check-decoder engine factory for llama-cpp-python (--engine)"
    ),
    Template(
        "model-api-decoder", "model_api_decoder.py", "your own speculative decoder on verispec's model API (--engine)"
    ),
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


WORKFLOW_SHARDS_MAX = 256  # GitHub Actions runs at most 256 jobs from one matrix


def workflow_text(
    shards: int | None = None,
    install: str | None = None,
    check_args: str | None = None,
    decoder_args: str | None = None,
) -> str:
    """The CI workflow with its shard count (and the matrix 1..shards), its install line, its
    check arguments and its decoder's check-decoder arguments set; None keeps the shipped value (no
    decoder). TemplateError for a count out of range or a value that would break the YAML line."""
    text = template_text("github-actions")
    if shards is not None:
        if isinstance(shards, bool) or not 1 <= shards <= WORKFLOW_SHARDS_MAX:
            raise TemplateError(f"--shards must be in 1..{WORKFLOW_SHARDS_MAX}, got {shards}")
        text = _set_line(text, "  SHARDS: ", f'"{shards}"')
        text = _set_line(text, "        shard: ", "[" + ", ".join(str(i) for i in range(1, shards + 1)) + "]")
    if install is not None:
        text = _set_line(text, "  INSTALL: ", _yaml_scalar("--install", install))
    if check_args is not None:
        text = _set_line(text, "  CHECK_ARGS: ", _yaml_scalar("--check-args", check_args))
    if decoder_args is not None:
        text = _set_line(text, "  DECODER_ARGS: ", _yaml_scalar("--decoder-args", decoder_args))
    return text


def _yaml_scalar(flag: str, value: str) -> str:
    """``value`` as one double-quoted YAML scalar (what a shell line then word-splits)."""
    if not value.strip() or any(c in value for c in "\n\r"):
        raise TemplateError(f"{flag} must be one non-empty line, got {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _set_line(text: str, prefix: str, value: str) -> str:
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if line.startswith(prefix)]
    if len(hits) != 1:
        raise TemplateError(f"the shipped workflow has {len(hits)} lines starting {prefix.strip()!r}, not one")
    lines[hits[0]] = prefix + value
    return "\n".join(lines)
