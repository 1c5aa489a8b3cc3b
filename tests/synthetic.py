"""The synthetic GGUF models, now shipped as :mod:`verispec.synth.models` (``verispec models synth``);
re-exported here so the tests' imports stay as they were."""

from verispec.synth.models import (
    BPE_SPECIALS as BPE_SPECIALS,
    FILE_TYPES as FILE_TYPES,
    GEMMA4_HF_CONFIG as GEMMA4_HF_CONFIG,
    PHI3_SPECIALS as PHI3_SPECIALS,
    QUANT_ROTATION as QUANT_ROTATION,
    VARIANTS as VARIANTS,
    SynthError as SynthError,
    Variant as Variant,
    bpe_vocabulary as bpe_vocabulary,
    fill as fill,
    spm_vocabulary as spm_vocabulary,
    write_synthetic as write_synthetic,
)
