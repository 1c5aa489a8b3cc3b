"""The tokenizer of a GGUF model, built from its metadata, token for token as llama.cpp.

Source of truth: llama.cpp ``src/llama-vocab.cpp`` (read at ggml-org/llama.cpp 00ad355e) and
``src/unicode.cpp`` (0c4093cc); the golden ids in tests/data/golden come from llama-cpp-python 0.3.36.

One text's journey through :meth:`Tokenizer.encode`::

    text ── split_special ──> [raw text | special token id]*     (longest special token first)
      raw text, kind "gpt2":  pretokenize (regexes of tokenizer.ggml.pre) -> bytes -> GPT-2 chars
                              -> BPE merges by rank -> ids                  (tokenizer_bpe.py)
      raw text, kind "llama": (" " prefix if add_space_prefix and first/after special) ->
                              " " -> "▁" -> merges by score -> ids, <0xXX> byte fallback
                                                                            (tokenizer_spm.py)
    [BOS] + ids + [EOS]   when asked

Which tokens are "special" here (llama.cpp ``tokenizer_st_partition``): every token of type CONTROL,
USER_DEFINED or UNKNOWN. USER_DEFINED tokens are split out of the text always; CONTROL and UNKNOWN
only with ``parse_special=True``. Longer tokens are split out first (ties: lower id first; llama.cpp
leaves equal-length order to ``std::sort``, which matters only for two equal-length special tokens
that overlap in the text). The LSTRIP/RSTRIP attributes that llama.cpp sets for a few model names
(phi-3, jina-v2, modern-bert) are not modelled.

Round trip (the statement tests check): for every ``str`` s without lone surrogates,
``decode(encode(s)) == s`` (no BOS/EOS; either ``parse_special``) except exactly where

1. kind "llama": every ``▁`` (U+2581) of s outside a special token comes back as ``" "``, because
   spaces are written as ``▁`` before merging and every normal token's ``▁`` decodes as a space;
2. kind "llama" with ``add_space_prefix``: a ``" "`` is inserted before every raw-text fragment that
   follows a special token; the one inserted before the first fragment is removed again by
   :meth:`decode`, which drops one leading space of the first token's piece (as llama.cpp's
   ``detokenize`` does); so is a leading space of a first *special* token that begins with one;
3. the vocabulary has a gap listed by :meth:`Tokenizer.roundtrip_caveats` (a byte with no token, a
   BPE merge whose result is not a token, tokens of types whose piece is not their text). A "gpt2"
   byte without a token is dropped, as llama.cpp drops it: SmolLM2 lacks 21 of the 256 byte
   characters (control bytes such as 0x04, bytes never found in UTF-8, and the lead bytes 0xF1/0xF2
   of planes 4-11), so U+0004 vanishes and a plane-4 code point loses its first byte.

NUL and every other code point are not exceptions. Text with lone surrogates cannot be UTF-8 and
raises :class:`TokenizerError`.

End of generation (``eog_ids``) follows llama.cpp's text-based rules: EOS, EOT, EOM, the FIM
pad/repo/separator tokens, and every token whose text is one of ``EOG_TEXTS``. With the current rules
Gemma-3's ``</s>`` (an HTML tag there) is an end-of-generation token, and like every EOG-looking
token it is forced to CONTROL, so it is split out of text only with ``parse_special=True``.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Union, cast

from verispec.reference import pretokenize as pre
from verispec.reference import tokenizer_bpe as bpe
from verispec.reference import tokenizer_spm as spm
from verispec.reference.errors import TokenizerError
from verispec.reference.gguf import (
    GGUFFile,
    MetadataValue,
)  # MetadataValue: str | int | float | bool | list[MetadataValue]

KEY = "tokenizer.ggml."


class TokenAttr:
    """llama.cpp's ``llama_token_attr`` bits (only those the tokenizer reads); plain ints for speed."""

    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5


# tokenizer.ggml.token_type values (gguf-py TokenType) -> attribute.
TOKEN_TYPE_ATTR: dict[int, int] = {
    0: TokenAttr.UNDEFINED,
    1: TokenAttr.NORMAL,
    2: TokenAttr.UNKNOWN,
    3: TokenAttr.CONTROL,
    4: TokenAttr.USER_DEFINED,
    5: TokenAttr.UNUSED,
    6: TokenAttr.BYTE,
}

SPECIAL_ATTRS = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN
HIDDEN_ATTRS = TokenAttr.CONTROL | TokenAttr.UNKNOWN  # not split out / not shown unless asked

# Texts llama.cpp treats as end of generation (llama_vocab::impl::load).
EOG_TEXTS: frozenset[str] = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<｜end▁of▁sentence｜>",
        "[e~[",
    }
)

# Auto-detected special tokens, by the metadata key they stand in for (first match in id order).
AUTO_DETECT: dict[str, tuple[str, ...]] = {
    "eot": (
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|end_of_text|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "<｜end▁of▁sentence｜>",
        "<end_of_utterance>",
    ),
    "eom": ("<|eom_id|>",),
    "fim_pre": (
        "<|fim_prefix|>",
        "<fim-prefix>",
        "<fim_prefix>",
        "<｜fim▁begin｜>",
        "<PRE>",
        "▁<PRE>",
        "<|code_prefix|>",
        "<|prefix|>",
    ),
    "fim_suf": (
        "<|fim_suffix|>",
        "<fim-suffix>",
        "<fim_suffix>",
        "<｜fim▁hole｜>",
        "<SUF>",
        "▁<SUF>",
        "<|code_suffix|>",
        "<|suffix|>",
    ),
    "fim_mid": (
        "<|fim_middle|>",
        "<fim-middle>",
        "<fim_middle>",
        "<｜fim▁end｜>",
        "<MID>",
        "▁<MID>",
        "<|code_middle|>",
        "<|middle|>",
    ),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}

# Metadata keys for special token ids, in llama.cpp's order (the deprecated prefix/suffix/middle
# keys come last and override fim_pre/fim_suf/fim_mid).
SPECIAL_ID_KEYS: tuple[tuple[str, str], ...] = (
    ("bos", "bos_token_id"),
    ("eos", "eos_token_id"),
    ("eot", "eot_token_id"),
    ("eom", "eom_token_id"),
    ("unk", "unknown_token_id"),
    ("sep", "seperator_token_id"),
    ("pad", "padding_token_id"),
    ("mask", "mask_token_id"),
    ("fim_pre", "fim_pre_token_id"),
    ("fim_suf", "fim_suf_token_id"),
    ("fim_mid", "fim_mid_token_id"),
    ("fim_pad", "fim_pad_token_id"),
    ("fim_rep", "fim_rep_token_id"),
    ("fim_sep", "fim_sep_token_id"),
    ("fim_pre", "prefix_token_id"),
    ("fim_suf", "suffix_token_id"),
    ("fim_mid", "middle_token_id"),
)

Fragment = Union[str, int]  # raw text, or the id of a special token split out of it


# --------------------------------------------------------------------------------------------------
# Reading metadata, with errors that name the key.
# --------------------------------------------------------------------------------------------------


def _scalar(metadata: Mapping[str, MetadataValue], name: str, kind: type) -> MetadataValue | None:
    value = metadata.get(KEY + name)
    if value is not None and type(value) is not kind:  # exact type: a bool is not an int here
        raise TokenizerError(f"metadata {KEY}{name} = {value!r} is not of type {kind.__name__}")
    return value


def _get_str(metadata: Mapping[str, MetadataValue], name: str) -> str | None:
    value = _scalar(metadata, name, str)
    return value if isinstance(value, str) else None


def _get_bool(metadata: Mapping[str, MetadataValue], name: str) -> bool | None:
    value = _scalar(metadata, name, bool)
    return value if isinstance(value, bool) else None


def _get_int(metadata: Mapping[str, MetadataValue], name: str) -> int | None:
    value = _scalar(metadata, name, int)
    return value if isinstance(value, int) else None


def _get_array(metadata: Mapping[str, MetadataValue], name: str, kinds: set[type]) -> list[MetadataValue] | None:
    value = metadata.get(KEY + name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise TokenizerError(f"metadata {KEY}{name} has type {type(value).__name__}, expected an array")
    if not set(map(type, value)) <= kinds:  # exact types: a bool is not an int here
        i, v = next((i, v) for i, v in enumerate(value) if type(v) not in kinds)
        raise TokenizerError(f"metadata {KEY}{name}[{i}] = {v!r} has type {type(v).__name__}")
    return value


def _get_strs(metadata: Mapping[str, MetadataValue], name: str) -> list[str] | None:
    value = _get_array(metadata, name, {str})
    return None if value is None else cast(list[str], value)  # element types checked above


def _get_numbers(metadata: Mapping[str, MetadataValue], name: str, n: int, kinds: set[type]) -> list[float] | None:
    value = _get_array(metadata, name, kinds)
    if value is None:
        return None
    if len(value) < n:
        raise TokenizerError(f"metadata {KEY}{name} has {len(value)} entries for {n} tokens")
    return list(map(float, cast(list[float], value[:n])))  # element types checked above


class Tokenizer:
    """Encode text to token ids and back, exactly as llama.cpp does for the same GGUF metadata.

    Build with :meth:`from_gguf` (a metadata mapping) or :meth:`from_file` (a ``.gguf`` path). See
    the module docstring for the pipeline, which tokens are special, and the round-trip statement.
    """

    kind: str
    pre: str
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    eog_ids: frozenset[int]

    def __init__(self, metadata: Mapping[str, MetadataValue]) -> None:
        """Use :meth:`from_gguf`; this reads the same metadata (raises TokenizerError on bad input)."""
        model = _get_str(metadata, "model")
        if model not in ("gpt2", "llama"):
            raise TokenizerError(f"unsupported tokenizer {KEY}model={model!r} (supported: 'gpt2', 'llama')")
        self.kind = model
        self.pre = _get_str(metadata, "pre") or ""

        tokens = _get_strs(metadata, "tokens")
        if not tokens:
            raise TokenizerError(f"metadata {KEY}tokens is missing or empty")
        n = len(tokens)
        self.vocab_size = n
        # llama.cpp renames empty tokens so that every text maps to one id.
        self._texts: list[str] = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
        self._ids: dict[str, int] = {t: i for i, t in enumerate(self._texts)}
        if len(self._ids) != n:
            seen: dict[str, int] = {}
            for i, t in enumerate(self._texts):
                if t in seen:
                    raise TokenizerError(f"duplicate token in vocabulary: {t!r} has ids {seen[t]} and {i}")
                seen[t] = i

        # No scores: all 0 (llama.cpp). Scores may be stored as float32 or int32.
        self._scores: list[float] = _get_numbers(metadata, "scores", n, {float, int}) or [0.0] * n
        types = _get_numbers(metadata, "token_type", n, {int})
        self._attrs: list[int] = (
            [TOKEN_TYPE_ATTR.get(int(t), TokenAttr.UNDEFINED) for t in types]
            if types is not None
            else [TokenAttr.NORMAL] * n
        )

        self._ranks: dict[tuple[str, str], int] = {}
        self._stages: tuple[pre.Stage, ...] = ()
        if self.kind == "gpt2":
            merges = _get_strs(metadata, "merges")
            if merges is None:
                raise TokenizerError(f"metadata {KEY}merges is missing (needed by a gpt2 tokenizer)")
            self._ranks = bpe.parse_merges(merges)
            self._stages = pre.pipeline_for(self.pre)

        self._read_flags(metadata)
        self._read_special_ids(metadata)
        self._derive_eog()
        # Special tokens, longest text (in UTF-8 bytes) first; ties by id.
        self._special_ids: list[int] = sorted(
            (i for i, a in enumerate(self._attrs) if a & SPECIAL_ATTRS),
            key=lambda i: (-len(self._texts[i].encode("utf-8")), i),
        )
        self._byte_ids: list[int | None] | None = None  # SPM byte fallback table, built on demand

    # -- construction helpers ----------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, metadata: Mapping[str, MetadataValue]) -> "Tokenizer":
        """The tokenizer described by GGUF ``metadata`` (the ``tokenizer.ggml.*`` keys).

        Raises TokenizerError for an unsupported ``tokenizer.ggml.model`` or ``.pre``, missing or
        mistyped arrays, duplicate tokens, or ``add_bos_token`` without a BOS id.
        """
        return cls(metadata)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> "Tokenizer":
        """Open the GGUF file at ``path`` and build its tokenizer (GGUFError if the file is bad)."""
        with GGUFFile.open(path) as gguf:
            return cls.from_gguf(gguf.metadata)

    def _read_flags(self, metadata: Mapping[str, MetadataValue]) -> None:
        # llama.cpp defaults: SPM adds BOS and a space prefix; byte-level BPE adds neither.
        spm_kind = self.kind == "llama"
        add_prefix = _get_bool(metadata, "add_space_prefix")
        add_bos = _get_bool(metadata, "add_bos_token")
        add_eos = _get_bool(metadata, "add_eos_token")
        self.add_space_prefix = add_prefix if add_prefix is not None else spm_kind
        self.add_bos = add_bos if add_bos is not None else spm_kind
        self.add_eos = add_eos if add_eos is not None else False

    def _read_special_ids(self, metadata: Mapping[str, MetadataValue]) -> None:
        n = self.vocab_size
        ids: dict[str, int | None] = {name: None for name, _ in SPECIAL_ID_KEYS}
        ids.update({"bos": 1, "eos": 2, "unk": 0} if self.kind == "llama" else {"bos": 11, "eos": 11})
        for name, key in SPECIAL_ID_KEYS:
            default = ids[name]
            if default is not None and default >= n:
                ids[name] = default = None  # a default outside the vocabulary is disabled
            value = _get_int(metadata, key)
            if value is not None and 0 <= value < n:  # an id outside the vocabulary is ignored
                ids[name] = value
        # Auto-detect by text what the metadata did not say; such a token is forced to CONTROL.
        for name, texts in AUTO_DETECT.items():
            found = [self._ids[t] for t in texts if t in self._ids]
            if ids[name] is None and found:
                ids[name] = min(found)
                self._attrs[min(found)] |= TokenAttr.CONTROL
        for i, attr in enumerate(self._attrs):
            if attr & TokenAttr.CONTROL and "unused" in self._texts[i]:
                self._attrs[i] |= TokenAttr.UNUSED
        self._special = ids
        self.bos_id, self.eos_id, self.eot_id = ids["bos"], ids["eos"], ids["eot"]
        self.unk_id, self.pad_id = ids["unk"], ids["pad"]
        if self.add_bos and self.bos_id is None:
            raise TokenizerError(f"{KEY}add_bos_token is true, but {KEY}bos_token_id is not set")
        if self.add_eos and self.eos_id is None:
            raise TokenizerError(f"{KEY}add_eos_token is true, but {KEY}eos_token_id is not set")

    def _derive_eog(self) -> None:
        ids = self._special
        eog = {i for k in ("fim_pad", "fim_rep", "fim_sep") if (i := ids[k]) is not None}
        for i in (self._ids[t] for t in EOG_TEXTS if t in self._ids):
            eog.add(i)
            self._attrs[i] |= TokenAttr.CONTROL
        # gpt-oss: these four are always rendered, as user-defined tokens.
        for t in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
            if t in self._ids:
                self._attrs[self._ids[t]] = TokenAttr.USER_DEFINED
        eog |= {i for k in ("eos", "eot", "eom") if (i := ids[k]) is not None}
        texts = {self._texts[i]: i for i in eog}
        # o200k_harmony / solar-open: "<|end|>" is not the end when "<|return|>"/"<|call|>" exist.
        has_call = "<|call|>" in texts or "<|calls|>" in texts
        end = texts.get("<|end|>")
        if end is not None and has_call and ("<|return|>" in texts or "<|flush|>" in texts):
            eog.discard(end)
            self._attrs[end] = TokenAttr.USER_DEFINED
        # gemma4 / paddleocr: "</s>" is not the end when "<|tool_response>" exists.
        close_s = texts.get("</s>")
        if close_s is not None and "<|tool_response>" in texts:
            eog.discard(close_s)
            self._attrs[close_s] = TokenAttr.NORMAL
        self.eog_ids = frozenset(eog)

    # -- vocabulary --------------------------------------------------------------------------------

    def _check_id(self, token_id: int) -> None:
        if not 0 <= token_id < self.vocab_size:
            raise TokenizerError(f"token id {token_id} is outside the vocabulary [0, {self.vocab_size})")

    def token_text(self, token_id: int) -> str:
        """The token's string as stored in the vocabulary (``Ġthe``, ``▁the``, ``<0x0A>``, ...)."""
        self._check_id(token_id)
        return self._texts[token_id]

    def token_attr(self, token_id: int) -> int:
        """The token's attributes after llama.cpp's adjustments (EOG-looking tokens -> CONTROL, ...)."""
        self._check_id(token_id)
        return self._attrs[token_id]

    def token_id(self, text: str) -> int | None:
        """The id of the vocabulary string ``text``, or None."""
        return self._ids.get(text)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes this token stands for in decoded text (llama.cpp ``token_to_piece``, special=true).

        Control, unknown and user-defined tokens: their text. Normal tokens: their text with ``▁`` ->
        space (kind "llama") or GPT-2 characters -> bytes (kind "gpt2"). Byte tokens ``<0xXX>``: that
        byte. Unused and undefined tokens: nothing.
        """
        self._check_id(token_id)
        attr = self._attrs[token_id]
        text = self._texts[token_id]
        if attr & SPECIAL_ATTRS:
            return text.encode("utf-8")
        if attr & TokenAttr.NORMAL:
            if self.kind == "llama":
                return spm.unescape_whitespace(text).encode("utf-8")
            return bpe.byte_decode(text)
        if attr & TokenAttr.BYTE:
            try:
                return bytes([int(text[3:5], 16)])
            except ValueError:
                raise TokenizerError(f"byte token {token_id} has text {text!r}, expected <0xXX>") from None
        return b""

    # -- encoding ----------------------------------------------------------------------------------

    def split_special(self, text: str, parse_special: bool) -> list[Fragment]:
        """Cut ``text`` into raw-text fragments and special token ids (llama.cpp tokenizer_st_partition).

        Special tokens are taken longest first; each cuts every raw fragment at all its
        non-overlapping occurrences, leftmost first. User-defined tokens always take part; control
        and unknown tokens only when ``parse_special``. No fragment is an empty string.
        """
        fragments: list[Fragment] = [text] if text else []
        for token in self._special_ids:
            if not parse_special and self._attrs[token] & HIDDEN_ATTRS:
                continue
            needle = self._texts[token]
            if needle not in text:  # a fragment is a substring of text: nothing to do
                continue
            cut: list[Fragment] = []
            for fragment in fragments:
                if isinstance(fragment, int) or needle not in fragment:
                    cut.append(fragment)
                    continue
                parts = fragment.split(needle)
                for k, part in enumerate(parts):
                    if k:
                        cut.append(token)
                    if part:
                        cut.append(part)
            fragments = cut
        return fragments

    def encode(
        self,
        text: str,
        *,
        add_bos: bool = False,
        add_eos: bool = False,
        parse_special: bool = False,
    ) -> list[int]:
        """Token ids of ``text`` (llama.cpp ``llama_tokenize``).

        ``add_bos`` / ``add_eos`` put the BOS / EOS id first / last (llama.cpp's ``add_special`` does
        so when the metadata's :attr:`add_bos` / :attr:`add_eos` say so: pass those to match it).
        ``parse_special`` lets control tokens written in the text (``<|im_start|>``) become their id.
        Raises TokenizerError when ``text`` is not valid Unicode (lone surrogates), when a BOS/EOS id
        is asked for but missing, or when a byte has no token in a "llama" vocabulary.
        """
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TokenizerError(f"text is not valid Unicode at index {exc.start}: {text[exc.start]!r}") from None
        ids: list[int] = []
        if add_bos:
            if self.bos_id is None:
                raise TokenizerError("BOS requested but the vocabulary has no BOS token")
            ids.append(self.bos_id)
        previous_was_special = True  # SPM: the first fragment gets the space prefix
        for fragment in self.split_special(text, parse_special):
            if isinstance(fragment, int):
                ids.append(fragment)
                previous_was_special = True
            elif self.kind == "llama":
                prefix = " " if self.add_space_prefix and previous_was_special else ""
                ids += self._encode_spm(prefix + fragment)
                previous_was_special = False
            else:
                ids += self._encode_bpe(fragment)
        if add_eos:
            if self.eos_id is None:
                raise TokenizerError("EOS requested but the vocabulary has no EOS token")
            ids.append(self.eos_id)
        return ids

    def pretokenize(self, text: str) -> list[str]:
        """The words a "gpt2" tokenizer merges within (before byte encoding); TokenizerError for "llama"."""
        if self.kind != "gpt2":
            raise TokenizerError(f"a {self.kind!r} tokenizer has no pre-tokenizer")
        return pre.pretokenize(text, self._stages)

    def _encode_bpe(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in pre.pretokenize(text, self._stages):
            for symbol in bpe.merge_word(bpe.byte_encode(word), self._ranks):
                ids += bpe.symbol_ids(symbol, self._ids)
        return ids

    def _encode_spm(self, text: str) -> list[int]:
        return spm.tokenize_escaped(spm.escape_whitespace(text), self._ids, self._scores, self._byte_token)

    def _byte_token(self, byte: int) -> int:
        # llama.cpp byte_to_token (SPM): "<0xXX>", else the one-byte string itself.
        if self._byte_ids is None:
            table: list[int | None] = []
            for b in range(256):
                t = self._ids.get(f"<0x{b:02X}>")
                if t is None and 0 < b < 0x80:
                    t = self._ids.get(chr(b))
                table.append(t)
            self._byte_ids = table
        token = self._byte_ids[byte]
        if token is None:
            raise TokenizerError(f"byte 0x{byte:02X} has no token (no <0x{byte:02X}> in the vocabulary)")
        return token

    # -- decoding ----------------------------------------------------------------------------------

    def _piece(self, token_id: int, first: bool, skip_special: bool) -> bytes:
        if skip_special and self.token_attr(token_id) & HIDDEN_ATTRS:
            return b""
        piece = self.token_bytes(token_id)
        if first and self.add_space_prefix and piece.startswith(b" "):
            piece = piece[1:]  # the space encode() put before the first word
        return piece

    def decode(self, ids: Sequence[int], *, skip_special: bool = False) -> str:
        """The text of ``ids``: the concatenated :meth:`token_bytes`, decoded as UTF-8.

        As llama.cpp ``detokenize`` with ``unparse_special=true`` (control tokens are shown, e.g.
        ``<|im_end|>``; ``skip_special=True`` hides control and unknown tokens instead), with one
        leading space dropped from the first token's piece when :attr:`add_space_prefix`, and without
        llama.cpp's ``clean_spaces`` post-processing (which some BPE pre-tokenizers enable and which
        is lossy). Byte sequences that are not valid UTF-8 (including one cut short at the end)
        become U+FFFD; nothing else is replaced. TokenizerError for an id outside the vocabulary.
        """
        data = b"".join(self._piece(t, k == 0, skip_special) for k, t in enumerate(ids))
        return data.decode("utf-8", errors="replace")

    def stream_decoder(self, *, skip_special: bool = False) -> "StreamDecoder":
        """A decoder fed one token at a time, for printing text as it is generated."""
        return StreamDecoder(self, skip_special=skip_special)

    # -- what the round trip depends on --------------------------------------------------------------

    def roundtrip_caveats(self) -> list[str]:
        """The vocabulary gaps that break ``decode(encode(s)) == s`` (item 3 of the module docstring).

        Empty for a complete vocabulary. Each entry names the gap: a byte with no token, a BPE merge
        whose result is not a token, a token whose piece is not its text (unused/undefined types; a
        byte type in a "gpt2" vocabulary; a "gpt2" control token with characters outside printable
        ASCII, whose raw text differs from its byte-encoded form).
        """
        caveats: list[str] = []
        if self.kind == "gpt2":
            missing = [b for b, ch in enumerate(bpe.byte_to_unicode()) if ch not in self._ids]
            if missing:
                caveats.append(f"bytes without a token: {missing[:8]}")
            unmade = [f"{a} {b}" for (a, b) in self._ranks if a and a + b not in self._ids]
            if unmade:
                caveats.append(f"merges whose result is not a token: {unmade[:8]}")
        else:
            missing = [b for b in range(256) if self._byte_token_or_none(b) is None]
            if missing:
                caveats.append(f"bytes without a byte-fallback token: {missing[:8]}")
        hollow = [i for i, a in enumerate(self._attrs) if not a & (SPECIAL_ATTRS | TokenAttr.NORMAL | TokenAttr.BYTE)]
        if hollow:
            caveats.append(f"tokens of unused/undefined type (decode to nothing): {hollow[:8]}")
        if self.kind == "gpt2":
            odd = [
                i
                for i, a in enumerate(self._attrs)
                if a & TokenAttr.BYTE or (a & HIDDEN_ATTRS and not all("!" <= c <= "~" for c in self._texts[i]))
            ]
            if odd:
                caveats.append(f"tokens whose piece differs from their byte-encoded text: {odd[:8]}")
        return caveats

    def _byte_token_or_none(self, byte: int) -> int | None:
        try:
            return self._byte_token(byte)
        except TokenizerError:
            return None


class StreamDecoder:
    """Incremental :meth:`Tokenizer.decode`: text comes out as soon as it is complete UTF-8.

    Contract: for any ids, ``"".join(d.push(t) for t in ids) + d.flush() == tok.decode(ids)`` (with
    the same ``skip_special``). Bytes of a character split across tokens are held back until the
    character is complete; a sequence that can never become valid UTF-8 is emitted as U+FFFD at once.
    """

    def __init__(self, tokenizer: Tokenizer, *, skip_special: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._first = True

    def push(self, token_id: int) -> str:
        """Add one token; return the text that is now complete (possibly "")."""
        piece = self._tokenizer._piece(token_id, self._first, self._skip_special)
        self._first = False
        return self._utf8.decode(piece)

    def push_all(self, ids: Iterable[int]) -> str:
        """:meth:`push` each id; the concatenated output."""
        return "".join(self.push(t) for t in ids)

    def flush(self) -> str:
        """End of stream: whatever is still held back (an incomplete character becomes U+FFFD)."""
        return self._utf8.decode(b"", final=True)
