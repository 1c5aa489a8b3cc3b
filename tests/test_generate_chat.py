"""reference/chat.py: chat formats by template family, rendered without a Jinja engine.

Expected strings are written out by hand from the templates' text (SmolLM2's template is in its
GGUF; Gemma's turn format is the one its template and model card give), not produced by the code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from verispec.reference.chat import ChatFormat, ChatFormatError, ChatMessage, chat_format
from verispec.reference.gguf import GGUFFile

SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
SMOL_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_chatml_inserts_the_default_system_prompt() -> None:
    fmt = chat_format({"general.architecture": "llama", "tokenizer.chat_template": SMOL_TEMPLATE})
    assert fmt == ChatFormat("chatml", SMOL_SYSTEM, "<|im_end|>")
    assert fmt.wrap("Hi") == (
        f"<|im_start|>system\n{SMOL_SYSTEM}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_chatml_keeps_an_explicit_system_prompt_and_turns() -> None:
    fmt = ChatFormat("chatml", SMOL_SYSTEM, "<|im_end|>")
    messages = [
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "Hi"),
        ChatMessage("assistant", "Hello."),
        ChatMessage("user", "Bye"),
    ]
    assert fmt.render(messages, add_generation_prompt=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
    )


def test_chatml_without_default_system() -> None:
    fmt = chat_format({"tokenizer.chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}...{% endfor %}"})
    assert fmt.default_system is None
    assert fmt.wrap("Name three primary colors.") == (
        "<|im_start|>user\nName three primary colors.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_gemma_turns_merge_the_system_prompt_into_the_first_user_turn() -> None:
    fmt = chat_format({"general.architecture": "gemma3"})  # the 270m GGUF ships no template
    assert fmt == ChatFormat("gemma", None, "<end_of_turn>")
    assert fmt.wrap("Hi") == "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    messages = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi"), ChatMessage("assistant", "Hello.")]
    assert fmt.render(messages, add_generation_prompt=False) == (
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
    )
    template = "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ role }}\n...<end_of_turn>\n{% endfor %}"
    assert chat_format({"general.architecture": "gemma3", "tokenizer.chat_template": template}).family == "gemma"


@pytest.mark.parametrize(
    "metadata, message",
    [
        ({"general.architecture": "llama"}, "no chat template"),
        ({"general.architecture": "llama", "tokenizer.chat_template": "[INST] {{ m }} [/INST]"}, "no known family"),
    ],
)
def test_unknown_formats_are_errors(metadata: dict[str, Any], message: str) -> None:
    with pytest.raises(ChatFormatError, match=message):
        chat_format(metadata)


def test_bad_roles() -> None:
    with pytest.raises(ChatFormatError, match="'tool'"):
        ChatFormat("chatml", None, "<|im_end|>").render([ChatMessage("tool", "x")])
    with pytest.raises(ChatFormatError, match="only come first"):
        ChatFormat("gemma", None, "<end_of_turn>").render([ChatMessage("user", "a"), ChatMessage("system", "b")])


@pytest.mark.model
def test_real_models(smollm2_path: Path, gemma3_path: Path) -> None:
    with GGUFFile.open(smollm2_path) as f:
        assert chat_format(f.metadata) == ChatFormat("chatml", SMOL_SYSTEM, "<|im_end|>")
    with GGUFFile.open(gemma3_path) as f:
        assert chat_format(f.metadata).family == "gemma"
