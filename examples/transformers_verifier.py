"""transformers' ``_speculative_sampling`` as a verifier under ``verispec check --law-only``.

    verispec check --law-only --verifier examples.transformers_verifier:verify \\
        --only range_and_mass stat_verdict_law_k1 ... --budget 600

transformers (5.x) verifies drafts in ``transformers.generation.utils._speculative_sampling``
with its own torch randomness (``torch.rand_like``, ``torch.multinomial``): it cannot replay the
protocol's uniforms, so only its LAW can be checked. This adapter hands it rows as logits
(log p, log q: its softmax gives the rows back, zeros as -inf) and reads (accepted, token, kind)
off what it returns. It validates nothing (rows that do not sum to 1, NaN, a draft with q = 0 all
produce a verdict), so the ``contract`` property fails by design of the function, not of the
adapter: leave it out with ``--only`` to test the law. Needs the ``oracle`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt


def verify(p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int]) -> tuple[int, int, str]:
    """One verification: p [k+1, V], q [k, V] probability rows, drafts [k] -> (accepted, token, kind)."""
    import torch
    from transformers.generation.utils import _speculative_sampling

    torch.set_num_threads(1)  # rows of a few thousand entries: a thread pool costs more than it saves
    p_rows = np.asarray(p, dtype=np.float64)
    q_rows = np.asarray(q, dtype=np.float64)
    k = len(drafts)
    with np.errstate(divide="ignore"):
        new_logits = torch.from_numpy(np.log(p_rows))[None]  # [1, k+1, V]
        candidate_logits = torch.from_numpy(np.log(q_rows))[None]  # [1, k, V]
    candidate_ids = torch.tensor([list(int(x) for x in drafts)], dtype=torch.long)  # [1, k]
    tokens, n_matches = _speculative_sampling(candidate_ids, candidate_logits, k, new_logits)
    accepted = int(n_matches)
    token: Any = tokens[0, -1]
    return accepted, int(token), "bonus" if accepted == k else "repair"
