"""Tokenizer unit tests on small hand-made vocabularies (no model files).

Oracles: Python's ``re`` running the GPT-2 pattern on a category-collapsed text (as llama.cpp's own
collapse trick does), naive quadratic BPE/SPM merge loops written here, and hand-derived expectations.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from verispec.reference import pretokenize as pre
from verispec.reference import tokenizer_bpe as bpe
from verispec.reference import tokenizer_spm as spm
from verispec.reference.errors import TokenizerError
from verispec.reference.tokenizer import TokenAttr, Tokenizer

# --------------------------------------------------------------------------------------------------
# Pre-tokenizer
# --------------------------------------------------------------------------------------------------

WHITE_SPACE = {
    0x09,
    0x0A,
    0x0B,
    0x0C,
    0x0D,
    0x20,
    0x85,
    0xA0,
    0x1680,
    *range(0x2000, 0x200B),
    0x2028,
    0x2029,
    0x202F,
    0x205F,
    0x3000,
}  # PropList.txt White_Space


def collapse(text: str) -> str:
    """One ASCII stand-in per code point with the same GPT-2-pattern class (space kept as space)."""
    out = []
    for ch in text:
        cat = unicodedata.category(ch)[0]
        if ch == " " or (ch < "\x80" and ord(ch) not in WHITE_SPACE):
            out.append(ch)  # ASCII outside whitespace is its own class (and spells contractions)
        elif ord(ch) in WHITE_SPACE:
            out.append("\t")
        elif cat == "L":
            out.append("A")
        elif cat == "N":
            out.append("0")
        else:
            out.append("!")
    return "".join(out)


GPT2_ASCII = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+", re.ASCII)
interesting = st.text(
    alphabet=st.sampled_from(list(" \t\n'sdmtlrev aZ09!.,é日٣\u00a0\u2003\x85\x1c\x00🙂")), max_size=30
)


@settings(max_examples=examples(500))
@given(text=st.one_of(st.text(max_size=30), interesting))
def test_gpt2_split_matches_the_regex(text: str) -> None:
    words = pre.split_gpt2(text)
    assert "".join(words) == text and all(words)
    expected = [m.end() - m.start() for m in GPT2_ASCII.finditer(collapse(text))]
    assert [len(w) for w in words] == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Hello world", ["Hello", " world"]),
        ("don't we'll", ["don", "'t", " we", "'ll"]),
        ("a  b", ["a", " ", " b"]),
        ("a \t!", ["a", " ", "\t", "!"]),
        ("end  ", ["end", "  "]),
        ("x\n\n\ny", ["x", "\n\n", "\n", "y"]),
        (" 42 -1", [" 42", " -", "1"]),
        ("I'M", ["I", "'", "M"]),  # contractions are case-sensitive in GPT-2's pattern
    ],
)
def test_gpt2_split_examples(text: str, words: list[str]) -> None:
    assert pre.split_gpt2(text) == words


@settings(max_examples=examples(300))
@given(text=st.one_of(st.text(max_size=30), interesting))
def test_class_splits_match_the_regex(text: str) -> None:
    """\\p{N}, \\p{N}+, [0-9]{3} and [\\p{P}$+<=>^~|]+ against re on a class-collapsed text."""

    def mark(member: Any) -> str:
        return "".join("x" if member(ch) else "." for ch in text)

    number = lambda ch: unicodedata.category(ch)[0] == "N"  # noqa: E731
    punct = lambda ch: unicodedata.category(ch)[0] == "P" or ch in "$+<=>^~|"  # noqa: E731
    for stage, member, pattern in [
        (pre.NUMBER_EACH, number, "x"),
        (pre.NUMBER_RUN, number, "x+"),
        (pre.DIGITS_3, lambda ch: ch in "0123456789", "xxx"),
        (pre.PUNCT_RUN, punct, "x+"),
    ]:
        spans = [(m.start(), m.end()) for m in re.finditer(pattern, mark(member))]
        assert stage.matches(text) == spans, stage.pattern
        pieces = stage.split(text)
        assert "".join(pieces) == text and all(pieces)


def test_pipelines() -> None:
    assert pre.pretokenize("abc123 x", pre.pipeline_for("smollm")) == ["abc", "1", "2", "3", " x"]
    assert pre.pretokenize("abc123 x", pre.pipeline_for("gpt-2")) == ["abc", "123", " x"]
    # default: punctuation runs, GPT-2, number runs, then ASCII digit triples
    assert pre.pretokenize("ab12345!?x", pre.pipeline_for("default")) == ["ab", "123", "45", "!?", "x"]
    assert pre.pipeline_for("") == pre.pipeline_for("default")
    with pytest.raises(TokenizerError, match="'llama3'"):
        pre.pipeline_for("llama3")


# --------------------------------------------------------------------------------------------------
# Merge loops against naive ones
# --------------------------------------------------------------------------------------------------


def naive_bpe(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    symbols = list(word)
    while True:
        best = min(
            ((ranks[(a, b)], i) for i, (a, b) in enumerate(zip(symbols, symbols[1:])) if (a, b) in ranks),
            default=None,
        )
        if best is None:
            return symbols
        i = best[1]
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]


def naive_spm(text: str, vocab: dict[str, int], scores: list[float]) -> list[str]:
    symbols = list(text)
    while True:
        best = min(
            ((-scores[vocab[a + b]], i) for i, (a, b) in enumerate(zip(symbols, symbols[1:])) if a + b in vocab),
            default=None,
        )
        if best is None:
            return symbols
        i = best[1]
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]


small_words = st.text(alphabet="abc", max_size=14)
pair_lists = st.lists(
    st.tuples(st.text("abc", min_size=1, max_size=3), st.text("abc", min_size=1, max_size=3)), max_size=25
)


@settings(max_examples=examples(300))
@given(word=small_words, pairs=pair_lists)
def test_bpe_merge_order(word: str, pairs: list[tuple[str, str]]) -> None:
    ranks: dict[tuple[str, str], int] = {}
    for rank, pair in enumerate(pairs):
        ranks.setdefault(pair, rank)
    assert bpe.merge_word(word, ranks) == naive_bpe(word, ranks)


@settings(max_examples=examples(300))
@given(
    text=small_words,
    pieces=st.lists(st.text("abc", min_size=2, max_size=5), max_size=25),
    score_seed=st.lists(st.integers(-3, 3), min_size=25, max_size=25),
)
def test_spm_merge_order(text: str, pieces: list[str], score_seed: list[int]) -> None:
    vocab = {p: i for i, p in enumerate(dict.fromkeys(["a", "b", "c", *pieces]))}
    scores = [float(score_seed[i % 25]) for i in range(len(vocab))]  # many ties on purpose
    assert spm.merge_text(text, vocab, scores) == naive_spm(text, vocab, scores)


def test_merge_ties_go_left() -> None:
    assert bpe.merge_word("aaa", {("a", "a"): 0}) == ["aa", "a"]
    assert spm.merge_text("aaa", {"a": 0, "aa": 1}, [0.0, -1.0]) == ["aa", "a"]


def test_parse_merges() -> None:
    ranks = bpe.parse_merges(["a b", "Ġ t", "a b", "  x", "nospace"])
    assert ranks == {("a", "b"): 0, ("Ġ", "t"): 1, (" ", "x"): 3, ("", ""): 4}


def test_byte_table_is_gpt2s() -> None:
    table = bpe.byte_to_unicode()
    assert table[ord("A")] == "A" and table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ"
    assert table[0] == "Ā" and table[0xAD] == "Ń" and len(set(table)) == 256
    assert bpe.byte_decode(bpe.byte_encode("日本 é\x00")) == "日本 é\x00".encode()


# --------------------------------------------------------------------------------------------------
# Whole tokenizers from hand-made metadata
# --------------------------------------------------------------------------------------------------

K = "tokenizer.ggml."
BYTES = list(bpe.byte_to_unicode())


def gpt2_metadata(merges: list[str], specials: Sequence[tuple[str, int]] = (), **extra: Any) -> dict[str, Any]:
    """A gpt2 vocabulary: specials, the 256 byte characters, then every merge result."""
    tokens = [t for t, _ in specials] + BYTES
    for m in merges:
        a, b = m.split(" ")
        if a + b not in tokens:
            tokens.append(a + b)
    types = [ty for _, ty in specials] + [1] * (len(tokens) - len(specials))
    meta: dict[str, Any] = {
        K + "model": "gpt2",
        K + "pre": "smollm",
        K + "tokens": tokens,
        K + "token_type": types,
        K + "merges": merges,
    }
    meta.update({K + k: v for k, v in extra.items()})
    return meta


MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "a n", "Ġa n", "Ġan d"]


def spm_metadata(pieces: list[tuple[str, float, int]], **extra: Any) -> dict[str, Any]:
    """A llama vocabulary: <unk> <s> </s>, the 256 byte tokens, then ``pieces`` (text, score, type)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [p for p, _, _ in pieces]
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [s for _, s, _ in pieces]
    types = [2, 3, 3] + [6] * 256 + [t for _, _, t in pieces]
    meta: dict[str, Any] = {K + "model": "llama", K + "tokens": tokens, K + "scores": scores, K + "token_type": types}
    meta.update({K + k: v for k, v in extra.items()})
    return meta


SPM_PIECES = [
    ("▁", -1.0, 1),
    ("▁h", -2.0, 1),
    ("▁hi", -1.5, 1),
    ("h", -3.0, 1),
    ("i", -3.0, 1),
    ("<ud>", 0.0, 4),
    ("▁x", -2.0, 1),
    ("x", -3.0, 1),
]


@settings(max_examples=examples(200))
@given(s=st.text(max_size=40))
def test_complete_gpt2_vocab_is_lossless(s: str) -> None:
    tok = Tokenizer.from_gguf(gpt2_metadata(MERGES, [("<|endoftext|>", 3), ("<ud>", 4)]))
    assert tok.roundtrip_caveats() == []
    for parse_special in (False, True):
        assert tok.decode(tok.encode(s, parse_special=parse_special)) == s


def test_gpt2_encoding_and_caveats() -> None:
    tok = Tokenizer.from_gguf(gpt2_metadata(MERGES))
    assert [tok.token_text(i) for i in tok.encode(" the and\x00")] == ["Ġthe", "Ġand", "Ā"]
    gap = gpt2_metadata(MERGES)
    gap[K + "tokens"] = [t for t in gap[K + "tokens"] if t != "Ā"]  # byte 0x00 has no token
    gap[K + "token_type"] = gap[K + "token_type"][:-1]
    gap[K + "merges"] = MERGES + ["x y"]  # a merge whose result is not a token
    tok = Tokenizer.from_gguf(gap)
    assert tok.roundtrip_caveats() == [
        "bytes without a token: [0]",
        "merges whose result is not a token: ['x y']",
    ]
    assert tok.decode(tok.encode("a\x00b")) == "ab"  # llama.cpp drops the byte


def test_special_partition_longest_first() -> None:
    """llama.cpp takes special tokens longest first, not leftmost: "abcd" wins over "xab"."""
    tok = Tokenizer.from_gguf(gpt2_metadata([], [("xab", 4), ("abcd", 4), ("<c>", 3)]))
    assert tok.split_special("xabcd<c>", parse_special=False) == ["x", 1, "<c>"]
    assert tok.split_special("xabcd<c>", parse_special=True) == ["x", 1, 2]
    assert tok.split_special("xab xab", parse_special=False) == [0, " ", 0]
    assert tok.split_special("", parse_special=True) == []


def test_bos_eos() -> None:
    tok = Tokenizer.from_gguf(gpt2_metadata(MERGES, [("<|endoftext|>", 3)], bos_token_id=0, eos_token_id=0))
    assert (tok.add_bos, tok.add_eos) == (False, False)  # byte-level BPE default
    assert tok.encode("the", add_bos=True, add_eos=True) == [0, *tok.encode("the"), 0]
    bare = gpt2_metadata(MERGES)  # defaults bos = eos = 11 (a byte token here)
    assert Tokenizer.from_gguf(bare).bos_id == 11
    small = gpt2_metadata([])
    small[K + "tokens"] = small[K + "tokens"][:5]
    small[K + "token_type"] = small[K + "token_type"][:5]
    tok = Tokenizer.from_gguf(small)  # default 11 is outside a 5-token vocabulary: disabled
    assert tok.bos_id is None
    with pytest.raises(TokenizerError, match="BOS"):
        tok.encode("x", add_bos=True)


def test_eog_rules() -> None:
    specials = [
        ("<|endoftext|>", 1),
        ("<|im_end|>", 4),
        ("<reponame>", 3),
        ("<fim_pad>", 3),
        ("</s>", 4),
        ("<|channel|>", 3),
        ("<other>", 3),
    ]
    tok = Tokenizer.from_gguf(gpt2_metadata([], specials, eos_token_id=6))
    assert tok.eog_ids == {0, 1, 2, 3, 4, 6}
    assert tok.token_attr(1) & TokenAttr.CONTROL  # <|im_end|> was user-defined: forced control
    assert tok.token_attr(5) == TokenAttr.USER_DEFINED  # gpt-oss rule
    assert tok.split_special("</s><|channel|>", parse_special=False) == ["</s>", 5]
    harmony = [("<|end|>", 3), ("<|return|>", 3), ("<|call|>", 3), ("<|tool_response>", 3), ("</s>", 3)]
    tok = Tokenizer.from_gguf(gpt2_metadata([], harmony, eos_token_id=2))
    assert tok.eog_ids == {1, 2, 3}  # <|end|> and </s> dropped by the two workarounds
    assert tok.token_attr(0) == TokenAttr.USER_DEFINED and tok.token_attr(4) == TokenAttr.NORMAL


def test_spm_basics() -> None:
    tok = Tokenizer.from_gguf(spm_metadata(SPM_PIECES, add_space_prefix=False))
    assert (tok.kind, tok.bos_id, tok.eos_id, tok.unk_id, tok.add_bos) == ("llama", 1, 2, 0, True)
    ids = tok.encode("hi hi")
    assert [tok.token_text(i) for i in ids] == ["h", "i", "▁hi"]
    assert [tok.token_text(i) for i in tok.encode("é")] == ["<0xC3>", "<0xA9>"]
    assert tok.decode(tok.encode("hi hi é\x00")) == "hi hi é\x00"
    assert tok.decode(tok.encode("h▁i")) == "h i"  # '▁' is not distinguishable from a space
    assert tok.encode("hi", add_bos=True) == [1, *tok.encode("hi")]


def test_unknown_and_control_split_only_with_special_parsing() -> None:
    tok = Tokenizer.from_gguf(spm_metadata(SPM_PIECES, add_space_prefix=False))
    assert tok.token_attr(0) == TokenAttr.UNKNOWN and tok.token_attr(2) == TokenAttr.CONTROL
    assert tok.split_special("h<unk></s><ud>", parse_special=False) == ["h<unk></s>", 3 + 256 + 5]
    assert tok.split_special("h<unk></s><ud>", parse_special=True) == ["h", 0, 2, 3 + 256 + 5]


def test_spm_space_prefix_statement() -> None:
    """add_space_prefix: a space before the first fragment and after each special; decode drops one."""
    tok = Tokenizer.from_gguf(spm_metadata(SPM_PIECES))
    assert tok.add_space_prefix  # llama.cpp's SPM default
    assert [tok.token_text(i) for i in tok.encode("hi")] == ["▁hi"]
    assert tok.decode(tok.encode("hi")) == "hi"
    assert [tok.token_text(i) for i in tok.encode("x<ud>x")] == ["▁x", "<ud>", "▁x"]
    assert tok.decode(tok.encode("x<ud>x")) == "x<ud> x"
    assert tok.decode(tok.encode("<ud>x")) == "<ud> x"
    assert tok.decode(tok.encode("hi", add_bos=True)) == "<s> hi"  # BOS first: nothing to drop


def test_spm_missing_byte() -> None:
    meta = spm_metadata(SPM_PIECES)
    meta[K + "tokens"][3 + 0xA9] = "<0xZZ>"  # no token for byte 0xA9 any more
    tok = Tokenizer.from_gguf(meta)
    assert tok.roundtrip_caveats() == ["bytes without a byte-fallback token: [169]"]
    with pytest.raises(TokenizerError, match="0xA9"):
        tok.encode("é")  # UTF-8 C3 A9


# --------------------------------------------------------------------------------------------------
# Decoding and streaming
# --------------------------------------------------------------------------------------------------


def test_decode_pieces_and_skip_special() -> None:
    tok = Tokenizer.from_gguf(spm_metadata(SPM_PIECES, add_space_prefix=False, add_bos_token=False))
    ids = [1, 3 + 256 + 2, 3 + 256 + 5, 0]  # <s> ▁hi <ud> <unk>
    assert [tok.token_text(i) for i in ids] == ["<s>", "▁hi", "<ud>", "<unk>"]
    assert tok.decode(ids) == "<s> hi<ud><unk>"
    assert tok.decode(ids, skip_special=True) == " hi<ud>"  # user-defined stays visible
    assert tok.token_bytes(3 + 0xFF) == b"\xff"
    assert tok.decode([3 + 0xFF, 3 + 0x41]) == "\ufffdA"  # only the invalid byte is replaced
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.decode([len(tok._texts)])


@settings(max_examples=examples(300))
@given(ids=st.lists(st.integers(0, 3 + 256 + len(SPM_PIECES) - 1), max_size=20), skip=st.booleans())
def test_stream_equals_decode(ids: list[int], skip: bool) -> None:
    tok = Tokenizer.from_gguf(spm_metadata(SPM_PIECES))
    stream = tok.stream_decoder(skip_special=skip)
    parts = [stream.push(i) for i in ids]
    assert "".join(parts) + stream.flush() == tok.decode(ids, skip_special=skip)


# --------------------------------------------------------------------------------------------------
# Bad metadata
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({K + "model": "bert"}, "unsupported tokenizer.*'bert'"),
        ({K + "model": 3}, "model = 3 is not of type str"),
        ({K + "pre": "qwen2"}, "unsupported pre-tokenizer.*'qwen2'"),
        ({K + "tokens": []}, "tokens is missing or empty"),
        ({K + "tokens": ["a", "b", "a"], K + "token_type": [1, 1, 1]}, "duplicate token.*'a' has ids 0 and 2"),
        ({K + "token_type": [1, True]}, r"token_type\[1\] = True"),
        ({K + "token_type": [1]}, "token_type has 1 entries"),
        ({K + "merges": None}, "merges is missing"),
        (
            {K + "add_bos_token": True, K + "bos_token_id": 10**6, K + "tokens": ["a"], K + "token_type": [1]},
            "add_bos_token is true",
        ),
        ({K + "add_bos_token": 1}, "add_bos_token = 1 is not of type bool"),
    ],
)
def test_bad_metadata(change: dict[str, Any], message: str) -> None:
    meta = gpt2_metadata(MERGES)
    meta.update(change)
    meta = {k: v for k, v in meta.items() if v is not None}
    with pytest.raises(TokenizerError, match=message):
        Tokenizer.from_gguf(meta)


def test_empty_token_is_renamed() -> None:
    meta = spm_metadata([("", 0.0, 1)])
    tok = Tokenizer.from_gguf(meta)
    assert tok.token_text(tok.vocab_size - 1) == f"[EMPTY_{tok.vocab_size - 1}]"
