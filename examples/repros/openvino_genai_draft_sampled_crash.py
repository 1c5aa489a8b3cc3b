"""openvino-genai draft-model speculative decoding, sampled: crash (prefix caching on) or a wrong law.

This defect is ALREADY REPORTED upstream: openvino.genai #4190 (open, 2026-07-20); fix PR #4490
"Accept Correct Token after Candidate Rejection" (open, 2026-09-16). Do not file it again:
comment on #4190 with verispec's reproduction.

Run (needs openvino-genai, which verispec's venv does not have; there is no model-free form,
because the defect is in the C++ sampler and block manager, which no Python stub reproduces
faithfully and no Python monkeypatch reaches)::

    pip install "openvino-genai==2026.4.1.0"      # into any venv; about half a minute
    python -c 'from pathlib import Path; from tests.support.peer_verdicts_cmd import write_peer_models; write_peer_models(Path("DIR"))'
    python examples/repros/openvino_genai_draft_sampled_crash.py DIR/tinyllama-bpe-f16.gguf DIR/tinyllama-1layer-bpe-f16.gguf

Without openvino-genai it prints what it needs and exits 2. With it, it runs
``examples/openvino_genai_draft_sampling_repro.py`` (fresh pipelines, do_sample=True) and prints
BROKEN with the count of crashed requests. FIXED needs openvino.genai built from source with
PR #4490 applied (C++): it cannot be shown here.

Root cause (openvino.genai master of 2026-08-21; verispec observed it on 2026.4.1.0), as
diagnosed in #4190: in ``Sampler::sample_from_sequence_group`` (``src/cpp/src/sampling/sampler.cpp``)
the sampled path handles a rejected draft candidate one iteration late:
``if (!is_validation_passed && sampling_params.do_sample && !sampling_params.is_prompt_lookup())
continue;`` skips removing the rejected tail (``remove_last_tokens``) and recording
``max_removed_tokens_per_request`` for that step. With prefix caching on, the stale context length
reaches ``Sequence::_make_hash`` (``src/cpp/src/sequence_group.cpp:32``) through
``block_manager.hpp`` and fails ``Check 'content_length <= prompt_ids.size() +
m_generated_ids.size()'``. ``LLMPipeline`` turns prefix caching on by default
(``src/cpp/src/utils.cpp:929``, ``default_config.enable_prefix_caching = true; // for better TTFT``).
With it off, #4190 reports no crash but silently corrupted output (a word dropped, its
continuation kept): a law defect.

Minimal fix: PR #4490 replaces that ``continue`` with the removal of the rejected tail and the
update of ``max_removed_tokens_per_request``, so the corrected token is accepted in the same step.

Versions affected: 2026.x through 2026.4.1.0 (at least); greedy decoding and prompt lookup are
unaffected. Related: #4190, PR #4490, and the same assertion reported in the PR #1951 thread
(2025-03-23).

What the user sees: ``LLMPipeline(target, "CPU", draft_model=draft_model(draft))`` with
``do_sample=True`` raises ``RuntimeError: Check 'content_length <= ...' failed`` on most requests
(5 of 6 in verispec's reproduction, the failing seeds depending on the draws); with
``SchedulerConfig(enable_prefix_caching=False)`` the requests complete, with output whose law is
not the target's (per #4190; verispec's gate has not judged it yet).
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

NEEDS = (
    "NEEDS: openvino-genai (pip install 'openvino-genai==2026.4.1.0') and two llama GGUFs it reads "
    "(F16, byte-level BPE), e.g. DIR/tinyllama-bpe-f16.gguf DIR/tinyllama-1layer-bpe-f16.gguf from "
    "tests.support.peer_verdicts_cmd.write_peer_models(Path(DIR)); "
    "FIXED needs a source build of openvino.genai with PR #4490"
)
LIBRARY_REPRO = Path(__file__).resolve().parents[1] / "openvino_genai_draft_sampling_repro.py"


def library_available() -> bool:
    return importlib.util.find_spec("openvino_genai") is not None


def main(argv: list[str]) -> int:
    if not library_available() or len(argv) != 3:
        print(NEEDS)
        return 2
    module = runpy.run_path(str(LIBRARY_REPRO))
    failed = int(module["main"]([str(LIBRARY_REPRO), *argv[1:]]))
    print(f"BROKEN: {'sampled draft-model requests crashed' if failed else 'no crash (not reproduced)'}")
    print("FIXED: not shown here (C++; needs openvino.genai built with PR #4490)")
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv))
