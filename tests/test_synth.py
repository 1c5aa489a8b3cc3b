"""``verispec models synth`` and :mod:`verispec.synth`: the shipped synthetic GGUF models.

What is shown:

- the same seed gives the same bytes, another seed other weights (every architecture);
- the file is byte for byte what gguf-py's own writer makes of the same converter calls (every
  variant, both tokenizers, the whole quant rotation): the NumPy writer and quantizers are
  gguf-py's, so every loader that reads gguf-py's files (transformers, llama.cpp, mlx-lm,
  openvino-genai) reads these; the transformers oracle itself runs in tests/test_oracle_synthetic.py;
- the quantizers agree with gguf-py on awkward blocks too (all zeros, exact halves, one huge
  entry), and round-trip through verispec's own dequantizer within half a quantization step;
- every architecture loads in the reference loader and decodes;
- the command: ``--list``, a written file's path on stdout, usage errors (exit 2) that write nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from verispec import cli
from verispec.reference.model import Model
from verispec.reference.quants import dequantize
from verispec.reference.tokenizer import Tokenizer
from verispec.synth import ARCHITECTURES, SynthError, synthesize
from verispec.synth.models import QUANT_ROTATION, VARIANTS, fill, write_synthetic
from verispec.synth.quants import TYPE_IDS, quantize


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_the_same_seed_gives_the_same_bytes(arch: str, tmp_path: Path) -> None:
    first = synthesize(arch, tmp_path / "a", seed=5).read_bytes()
    again = synthesize(arch, tmp_path / "b", seed=5).read_bytes()
    other = synthesize(arch, tmp_path / "c", seed=6).read_bytes()
    assert first == again
    assert len(other) == len(first) and other != first  # the same layout, other weights


def _gguf_py_bytes(path: Path, name: str, tokenizer: str) -> bytes:
    import gguf

    writer = gguf.GGUFWriter(str(path), VARIANTS[name].arch)
    fill(writer, VARIANTS[name], seed=3, tokenizer=tokenizer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


@pytest.mark.parametrize("tokenizer", ["spm", "bpe"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_file_is_gguf_pys_byte_for_byte(name: str, tokenizer: str, tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    ours = tmp_path / "ours.gguf"
    written = write_synthetic(ours, name, seed=3, tokenizer=tokenizer)
    assert set(QUANT_ROTATION) <= set(written.values())  # every quantizer took part
    assert ours.read_bytes() == _gguf_py_bytes(tmp_path / "gguf_py.gguf", name, tokenizer)


def _awkward_rows() -> np.ndarray:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((6, 64)).astype(np.float32)
    rows[0] = 0.0  # d = 0: the inverse scale must be 0, not inf
    rows[1, :32] = np.float32(0.5) * np.arange(32)  # exact halves at the rounding boundaries
    rows[2, 5] = 1e4  # one entry dominates its block
    rows[3] = -rows[3]
    rows[4, 32:] = 7.0  # a constant block
    # Q8_0 with scale 1 (absmax 127): the float32 just below 0.5 must round to 0 (C's roundf);
    # floor(x + 0.5) gives 1 there, the sum rounding up to 1.0
    rows[5, :32] = 0.0
    rows[5, 0], rows[5, 1] = 127.0, np.nextafter(np.float32(0.5), np.float32(0))
    return rows


@pytest.mark.parametrize("type_name", sorted(TYPE_IDS))
def test_the_quantizers_are_gguf_pys(type_name: str) -> None:
    gguf = pytest.importorskip("gguf")
    from gguf.quants import quantize as gguf_quantize

    rows = _awkward_rows()
    expected = gguf_quantize(rows, gguf.GGMLQuantizationType[type_name])
    got = quantize(rows, type_name)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("type_name", sorted(set(TYPE_IDS) - {"F32"}))
def test_the_quantizers_round_trip_through_our_dequantizer(type_name: str) -> None:
    """Each value comes back within half a quantization step of its block (F16/BF16: within their
    relative rounding), so the writer cannot have shuffled nibbles or scales (a shuffle moves values
    by whole steps)."""
    rows = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    raw = np.ascontiguousarray(quantize(rows, type_name)).view(np.uint8).reshape(-1)
    back = dequantize(raw, TYPE_IDS[type_name], rows.size).reshape(rows.shape)
    blocks, back_blocks = rows.reshape(-1, 32), back.reshape(-1, 32)
    if type_name in ("F16", "BF16"):
        relative = 2.0**-11 if type_name == "F16" else 2.0**-8  # half an ulp of an 11- / 8-bit significand
        assert np.all(np.abs(back - rows) <= relative * np.abs(rows) + 1e-7)
        return
    levels = {"Q4_0": 15, "Q4_1": 15, "Q5_0": 31, "Q5_1": 31, "Q8_0": 254}[type_name]
    step = (blocks.max(axis=1) - blocks.min(axis=1)) / levels  # the finest step a block can have
    # symmetric types spend the step on 2 * absmax, not on max - min; their step is at most 2x coarser.
    # The scale is stored in float16: ~1e-3 relative, so the bound gains that too.
    bound = (np.abs(blocks).max(axis=1) * 2 / levels) * (0.5 + 1e-3) + 1e-6
    assert np.all(np.abs(back_blocks - blocks).max(axis=1) <= np.maximum(bound, step))


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_every_architecture_loads_and_decodes_in_the_reference(arch: str, tmp_path: Path) -> None:
    path = synthesize(arch, tmp_path, seed=0)
    model, tokenizer = Model.load(path), Tokenizer.from_file(path)
    assert model.config.arch == VARIANTS[ARCHITECTURES[arch].variant].arch
    ids = [int(t) for t in tokenizer.encode("the model says", add_bos=tokenizer.add_bos)]
    logits = model.forward(ids, model.new_cache(len(ids))).logits
    assert logits.shape == (len(ids), model.config.n_vocab) and np.all(np.isfinite(logits))
    assert float(np.std(logits[-1])) > 0.1  # random weights, not a degenerate constant row


def test_the_command_lists_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["models", "synth", "--list"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(ARCHITECTURES)
    assert (
        cli.main(
            [
                "models",
                "synth",
                "--arch",
                "mistral",
                "--out",
                str(tmp_path),
                "--seed",
                "2",
                "--types",
                "Q8_0,F16",
                "--tokenizer",
                "bpe",
            ]
        )
        == 0
    )
    path = Path(capsys.readouterr().out.strip())
    assert path == tmp_path / "mistral-seed2.gguf"
    reference = tmp_path / "direct.gguf"
    write_synthetic(reference, "mistral", seed=2, quant_types=("Q8_0", "F16"), tokenizer="bpe")
    assert path.read_bytes() == reference.read_bytes()


@pytest.mark.parametrize(
    "argv",
    [
        ["--arch", "llama"],  # no --out
        ["--arch", "llama", "--out", "OUT", "--types", "Q9"],  # unknown type
        ["--arch", "llama", "--out", "OUT", "--types", ","],  # no type at all
        ["--arch", "llama", "--out", "OUT", "--seed", "-1"],
        ["--arch", "falcon", "--out", "OUT"],
    ],
)
def test_usage_errors_exit_2_and_write_nothing(argv: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [str(out) if a == "OUT" else a for a in argv]
    assert _status(["models", "synth", *argv]) == 2
    assert not out.exists()


def _status(argv: list[str]) -> int:
    """The exit status, whether the command returns it or argparse exits with it."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_an_unknown_name_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(SynthError, match="unknown architecture"):
        synthesize("falcon", tmp_path)
    with pytest.raises(SynthError, match="unknown synthetic model"):
        write_synthetic(tmp_path / "x.gguf", "falcon")
    assert list(tmp_path.iterdir()) == []
