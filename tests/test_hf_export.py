"""verispec/peers/hf_export.py: a llama GGUF written as a Hugging Face folder (config.json +
model.safetensors) for peers that cannot read GGUF (mlx-lm).

Without any peer: the Q/K row order is the exact inverse of llama.cpp's converter, the safetensors
file reads back bit for bit, and a non-llama file is refused in one line. With transformers (the
oracle extra): transformers' ``LlamaForCausalLM`` on the folder computes our reference forward of
the GGUF, and a folder written WITHOUT the row fix does not (so the comparison can fail).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.synthetic import VARIANTS, write_synthetic
from verispec.peers import hf_export
from verispec.peers.hf_export import CONFIG, WEIGHTS, export, unpermute_rows, write_safetensors
from verispec.reference.errors import UnsupportedArchitecture

# transformers is another float32 function of the same dequantized numbers: the tolerance and its
# reasons are tests/test_oracle_synthetic.py's (LOGIT_TOL, measured ~1e-5 here too)
LOGIT_TOL = 1e-3
IDS = [1, 5, 300, 40, 77, 12, 250, 3, 9, 100, 200, 150, 33]


def converter_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's ``LlamaModel.permute`` (Hugging Face rows -> llama.cpp rows)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("n_head, head_dim", [(8, 8), (1, 8), (4, 16)])
def test_unpermute_inverts_the_converter(n_head: int, head_dim: int) -> None:
    hf = np.random.default_rng(n_head).standard_normal((n_head * head_dim, 24)).astype(np.float32)
    assert np.array_equal(unpermute_rows(converter_permute(hf, n_head), n_head), hf)
    assert not np.array_equal(converter_permute(hf, n_head), hf)  # the permutation is not the identity


def test_unpermute_refuses_rows_that_are_not_heads() -> None:
    with pytest.raises(UnsupportedArchitecture, match="not n_head=3 heads"):
        unpermute_rows(np.zeros((8, 4), dtype=np.float32), 3)


def test_safetensors_read_back_bit_for_bit(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(0)
    arrays = {
        "a": rng.standard_normal((3, 5)).astype(np.float32),
        "b.weight": rng.standard_normal(7).astype(np.float32),
    }
    write_safetensors(tmp_path / "x.safetensors", arrays)
    back = st.load_file(str(tmp_path / "x.safetensors"))
    assert set(back) == set(arrays) and all(np.array_equal(back[k], arrays[k]) for k in arrays)


def test_export_refuses_another_architecture(tmp_path: Path) -> None:
    write_synthetic(tmp_path / "phi3.gguf", VARIANTS["phi3"], seed=2)
    with pytest.raises(UnsupportedArchitecture, match="architecture 'phi3'"):
        export(tmp_path / "phi3.gguf", tmp_path / "out")


def test_export_writes_the_config_of_the_file(tmp_path: Path) -> None:
    write_synthetic(tmp_path / "t.gguf", VARIANTS["tinyllama"], seed=3)
    folder = export(tmp_path / "t.gguf", tmp_path / "hf")
    config = json.loads((folder / CONFIG).read_text())
    v = VARIANTS["tinyllama"]
    assert (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["head_dim"],
        config["intermediate_size"],
    ) == (v.n_embd, v.n_layer, v.n_head, v.n_head_kv, v.head_dim, v.n_ff)
    assert config["eos_token_id"] == [2] and config["tie_word_embeddings"] is False
    assert (folder / WEIGHTS).stat().st_size > 0


@pytest.mark.oracle
def test_transformers_on_the_folder_computes_our_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from verispec.reference.model import Model

    gguf = tmp_path / "t.gguf"
    write_synthetic(gguf, VARIANTS["tinyllama"], seed=3)
    ref = Model.load(gguf)
    ours = ref.forward(IDS, ref.new_cache(len(IDS))).logits

    def theirs(folder: Path) -> np.ndarray:
        model = transformers.LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
        with torch.no_grad():
            out: np.ndarray = model(torch.tensor([IDS])).logits[0].numpy()
        return out

    good = float(np.max(np.abs(theirs(export(gguf, tmp_path / "hf")) - ours)))
    assert good <= LOGIT_TOL, good
    monkeypatch.setattr(hf_export, "unpermute_rows", lambda w, n_head: w)  # the rows left in llama.cpp's order
    bad = float(np.max(np.abs(theirs(export(gguf, tmp_path / "hf-unfixed")) - ours)))
    assert bad > 100 * LOGIT_TOL, bad
