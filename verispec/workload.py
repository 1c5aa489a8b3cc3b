"""The bench workload: what people speed up with speculation, in Spec-Bench's categories.

``verispec/data/workload.jsonl`` (written for this project, not copied from a data set) holds one
request per line::

    {"category": "rag", "id": "rag-1", "messages": [{"role": "user", "content": "..."}], "max_tokens": 192}

Categories: Spec-Bench's six (multi-turn conversation, translation, summarisation, question
answering, maths reasoning, retrieval-augmented answering over a given passage) plus code editing of
a pasted function. ``messages`` is a chat (the model's own chat format renders it, so the instruct
models see their turn markers); the last message is the user's, the answer is generated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from verispec.reference.chat import ROLES, ChatFormat, ChatMessage
from verispec.reference.errors import WorkloadError as WorkloadError
from verispec.reference.json_input import loads, read_regular, shown

WORKLOAD = Path(__file__).resolve().parent / "data" / "workload.jsonl"
CATEGORIES: tuple[str, ...] = ("multi_turn", "translation", "summarisation", "qa", "maths", "rag", "code_edit")
MAX_TOKENS_BOUNDS = (1, 4096)  # generated tokens per request
MAX_FILE_BYTES = 16 * 1024 * 1024  # checked before reading: a workload is text, not a corpus


@dataclass(frozen=True)
class WorkloadItem:
    category: str
    id: str
    messages: tuple[ChatMessage, ...]
    max_tokens: int

    def prompt_text(self, chat: ChatFormat) -> str:
        """The conversation in the model's chat format, ending by opening the assistant's turn."""
        return chat.render(self.messages)


def load_workload(path: Path = WORKLOAD) -> tuple[WorkloadItem, ...]:
    """Every request of the workload file, in file order; WorkloadError for a bad file or line
    (a regular file of at most MAX_FILE_BYTES, every line through the bounded JSON reader)."""
    data = read_regular(path, "workload", max_bytes=MAX_FILE_BYTES, error=WorkloadError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise WorkloadError(f"workload {path} is not UTF-8") from None
    items = [_parse_line(line, n, path) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not items:
        raise WorkloadError(f"workload {path} has no requests")
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise WorkloadError(f"workload {path}: id {shown(item.id)} appears more than once")
        seen.add(item.id)
    return tuple(items)


def _parse_line(line: str, number: int, path: Path) -> WorkloadItem:
    where = f"workload {path} line {number}"
    row = loads(line, where, error=WorkloadError)
    if not isinstance(row, dict):
        raise WorkloadError(f"{where}: expected an object")
    category, ident, messages, max_tokens = (row.get(k) for k in ("category", "id", "messages", "max_tokens"))
    if category not in CATEGORIES:
        raise WorkloadError(f"{where}: category {shown(category)} is not one of {', '.join(CATEGORIES)}")
    if not isinstance(ident, str) or not ident:
        raise WorkloadError(f"{where}: id must be a non-empty string")
    lo, hi = MAX_TOKENS_BOUNDS
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not lo <= max_tokens <= hi:
        raise WorkloadError(f"{where}: max_tokens must be an integer in {lo}..{hi}, got {shown(max_tokens)}")
    if not isinstance(messages, list) or not messages:
        raise WorkloadError(f"{where}: messages must be a non-empty list")
    parsed: list[ChatMessage] = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise WorkloadError(f"{where}: each message needs a role ({', '.join(ROLES)}) and a string content")
        parsed.append(ChatMessage(str(m["role"]), str(m["content"])))
    if parsed[-1].role != "user":
        raise WorkloadError(f"{where}: the last message must be the user's (the answer is generated)")
    return WorkloadItem(category, ident, tuple(parsed), max_tokens)


def select(
    items: Sequence[WorkloadItem], categories: Sequence[str] | None = None, per_category: int | None = None
) -> tuple[WorkloadItem, ...]:
    """The items of ``categories`` (all when None), the first ``per_category`` of each (all when None).

    WorkloadError for an unknown category or a per-category count below 1.
    """
    wanted = list(CATEGORIES) if categories is None else list(categories)
    unknown = [c for c in wanted if c not in CATEGORIES]
    if unknown or not wanted:
        raise WorkloadError(f"unknown workload categories {unknown or wanted!r}; known: {', '.join(CATEGORIES)}")
    if per_category is not None and per_category < 1:
        raise WorkloadError(f"prompts per category must be >= 1, got {per_category}")
    out: list[WorkloadItem] = []
    for category in wanted:
        chosen = [i for i in items if i.category == category]
        out.extend(chosen if per_category is None else chosen[:per_category])
    return tuple(out)
