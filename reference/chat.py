"""Chat formats: wrap a conversation in the turn markers a chat model was trained on.

verispec does not run Jinja. It recognises the *family* of the model's chat template
(``tokenizer.chat_template`` in the GGUF metadata) and renders that family's format in plain code:

- ``chatml`` (SmolLM2, Qwen, ...)::

      <|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{text}<|im_end|>\\n<|im_start|>assistant\\n

  SmolLM2's template inserts its default system prompt when the conversation has none; the format
  carries that default (read from the template text when it has the SmolLM2 shape).
- ``gemma`` (Gemma 2/3)::

      <start_of_turn>user\\n{system}\\n\\n{text}<end_of_turn>\\n<start_of_turn>model\\n

  Gemma has no system role: a system message is prepended to the first user turn. The template's
  leading ``<bos>`` is not rendered: the tokenizer adds BOS (``add_bos_token``), as llama.cpp does.

A GGUF without a template (the gemma3-270m file) gets its architecture's family. Anything else is a
clear :class:`ChatFormatError` rather than a silently unformatted prompt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from verispec.reference.errors import ChatFormatError as ChatFormatError


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system", "user" or "assistant"
    content: str


ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class ChatFormat:
    """One chat family: how turns are opened and closed, and what ends the model's turn."""

    family: str  # "chatml" or "gemma"
    default_system: str | None  # system prompt inserted when the conversation has none
    end_of_turn: str  # the control token that closes a turn (generation stops on it)

    def render(self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True) -> str:
        """The conversation as prompt text (special tokens written out; encode with parse_special).

        With ``add_generation_prompt`` the text ends by opening the assistant's turn.
        """
        for m in messages:
            if m.role not in ROLES:
                raise ChatFormatError(f"unknown chat role {m.role!r} (expected one of {', '.join(ROLES)})")
        if self.family == "chatml":
            return _render_chatml(messages, self.default_system, add_generation_prompt)
        if self.family == "gemma":
            return _render_gemma(messages, add_generation_prompt)
        raise ChatFormatError(f"unknown chat family {self.family!r}")

    def wrap(self, prompt: str) -> str:
        """A single user message, ready for the assistant's answer."""
        return self.render([ChatMessage("user", prompt)])


def _render_chatml(messages: Sequence[ChatMessage], default_system: str | None, open_reply: bool) -> str:
    parts: list[str] = []
    if default_system is not None and (not messages or messages[0].role != "system"):
        parts.append(f"<|im_start|>system\n{default_system}<|im_end|>\n")
    for m in messages:
        parts.append(f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n")
    if open_reply:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _render_gemma(messages: Sequence[ChatMessage], open_reply: bool) -> str:
    system = ""
    rest = list(messages)
    if rest and rest[0].role == "system":
        system = rest[0].content + "\n\n"
        rest = rest[1:]
    parts: list[str] = []
    for i, m in enumerate(rest):
        if m.role == "system":
            raise ChatFormatError("gemma chat format: a system message may only come first")
        role = "model" if m.role == "assistant" else "user"
        content = (system + m.content) if i == 0 else m.content
        parts.append(f"<start_of_turn>{role}\n{content}<end_of_turn>\n")
    if not rest and system:  # a system message alone still reaches the model
        parts.append(f"<start_of_turn>user\n{system}<end_of_turn>\n")
    if open_reply:
        parts.append("<start_of_turn>model\n")
    return "".join(parts)


# SmolLM2's template: {{ '<|im_start|>system\nYou are a helpful ...<|im_end|>\n' }} when absent.
_CHATML_DEFAULT_SYSTEM = re.compile(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", re.DOTALL)

# Architectures whose GGUF may come without a template, and the family they use.
_ARCH_FAMILY = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma"}


def chat_format(metadata: Mapping[str, object]) -> ChatFormat:
    """The chat format of a model, from its GGUF metadata (template family, else architecture).

    Raises :class:`ChatFormatError` naming the architecture when no family applies.
    """
    template = metadata.get("tokenizer.chat_template")
    arch = str(metadata.get("general.architecture", ""))
    if isinstance(template, str) and template:
        if "<|im_start|>" in template:
            found = _CHATML_DEFAULT_SYSTEM.search(template)
            return ChatFormat("chatml", found.group(1) if found else None, "<|im_end|>")
        if "<start_of_turn>" in template:
            return ChatFormat("gemma", None, "<end_of_turn>")
        raise ChatFormatError(f"the chat template of this {arch!r} model is of no known family (known: chatml, gemma)")
    family = _ARCH_FAMILY.get(arch)
    if family == "gemma":
        return ChatFormat("gemma", None, "<end_of_turn>")
    raise ChatFormatError(f"model architecture {arch!r} has no chat template in its metadata")


def optional_chat_format(metadata: Mapping[str, object], *, required: bool = False) -> ChatFormat | None:
    """The model's chat format, or None when it has none (a ChatFormatError if ``required``)."""
    try:
        return chat_format(metadata)
    except ChatFormatError:
        if required:
            raise
        return None
