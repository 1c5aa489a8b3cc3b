"""The synthetic GGUF models, now shipped as :mod:`verispec.synth.models` (``verispec models synth``);
re-exported here so the tests' imports stay as they were."""

from verispec.synth.models import (
    BPE_SPECIALS as BPE_SPECIALS,
)
from verispec.synth.models import (
    FILE_TYPES as FILE_TYPES,
)
from verispec.synth.models import (
    GEMMA4_HF_CONFIG as GEMMA4_HF_CONFIG,
)
from verispec.synth.models import (
    PHI3_SPECIALS as PHI3_SPECIALS,
)
from verispec.synth.models import (
    QUANT_ROTATION as QUANT_ROTATION,
)
from verispec.synth.models import (
    VARIANTS as VARIANTS,
)
from verispec.synth.models import (
    SynthError as SynthError,
)
from verispec.synth.models import (
    Variant as Variant,
)
from verispec.synth.models import (
    bpe_vocabulary as bpe_vocabulary,
)
from verispec.synth.models import (
    fill as fill,
)
from verispec.synth.models import (
    spm_vocabulary as spm_vocabulary,
)
from verispec.synth.models import (
    write_synthetic as write_synthetic,
)
