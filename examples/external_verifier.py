#!/usr/bin/env python3
"""A speculative-sampling verifier in plain Python, speaking the verispec wire protocol (v1).

It does not import verispec or numpy: it is written from the protocol texts (the random-draw
protocol, spec/protocol.md; the wire protocol, spec/external/__init__.py and README "Checking another
implementation") the way a Rust or TypeScript implementation would be, and it is checked the same
way. Independent oracle by design: its draw and residual rule are its own plain-Python copies
(never verispec's), so the gate checking it is checking a second reading of the protocol text:

    verispec check --verifier-cmd "python examples/external_verifier.py"

Reads one JSON request per line on stdin, writes one JSON response per line on stdout:
``{"id", "op", "input"}`` -> ``{"id", "output"}`` | ``{"id", "error"}`` | ``{"id", "unsupported"}``.
Ops served: sampled, sampled_batch, greedy, rows, target_law, conformal_index. Not served (answered
"unsupported", which the checker reports as skipped): gate, dequantize.

The random-draw protocol, version 1, is spec/protocol.md; :func:`verify` and :func:`draw` follow it.
"""

from __future__ import annotations

import json
import math
import sys

TOLERANCE = 1e-6  # rows must sum to 1 within this


class Rejected(Exception):
    """The input breaks the contract; answered with an error response."""


# --- contract checks ---------------------------------------------------------------------------


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_row_of_weights(row):
    """True when every entry of a non-empty ``row`` is a number (int or float, not bool), finite
    and >= 0: what :func:`check_rows` asks of each entry, decided per row by C loops (the set of
    entry types, one ``math.fsum``, one ``min``) instead of a Python call per entry. A finite
    fsum rules out nan and +-inf among the entries (either makes it nan or infinite, or raises),
    so ``min`` then compares real numbers. False may also mean "look entry by entry" (a huge
    int, an overflowing sum): the caller's per-entry loop decides those as before."""
    if not set(map(type, row)) <= {int, float}:
        return False
    try:
        total = math.fsum(row)
    except (OverflowError, ValueError):
        return False
    return math.isfinite(total) and min(row) >= 0


def check_rows(rows, count, vocab, name):
    if not isinstance(rows, list) or len(rows) != count:
        raise Rejected(f"{name} must have {count} rows")
    for row in rows:
        if not isinstance(row, list) or len(row) != vocab:
            raise Rejected(f"{name} rows must have {vocab} entries")
        if not is_row_of_weights(row):  # the whole row at once; the loop runs only to name a bad entry
            for value in row:
                if not is_number(value) or value < 0:
                    raise Rejected(f"{name} has an entry that is not a finite number >= 0: {value!r}")
        if abs(math.fsum(row) - 1.0) > TOLERANCE:
            raise Rejected(f"a row of {name} sums to {math.fsum(row)!r}")


def check_item(q, drafts, uniforms, k, vocab):
    if not isinstance(drafts, list) or len(drafts) != k:
        raise Rejected(f"need {k} drafts")
    if not isinstance(uniforms, list) or len(uniforms) != k + 1:
        raise Rejected(f"need k + 1 = {k + 1} uniforms")
    for i, x in enumerate(drafts):
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < vocab:
            raise Rejected(f"draft {x!r} is not an id in [0, {vocab})")
        if not q[i][x] > 0:
            raise Rejected(f"draft {x} at position {i} has q = 0")
    for u in uniforms:
        if not is_number(u) or not 0.0 <= u < 1.0:
            raise Rejected(f"uniform {u!r} is not in [0, 1)")


def check_shapes(p, q, k):
    if k < 1:
        raise Rejected("need at least one draft")
    if not isinstance(p, list) or not p or not isinstance(p[0], list):
        raise Rejected("p must be a list of rows")
    vocab = len(p[0])
    if vocab < 1:
        raise Rejected("empty vocabulary")
    check_rows(p, k + 1, vocab, "p")
    check_rows(q, k, vocab, "q")
    return vocab


# --- the protocol -----------------------------------------------------------------------------


def running_sums(weights):
    """What a draw from ``weights`` needs: their running sums and the largest id of positive weight."""
    running = []
    total = 0.0
    for w in weights:
        total += w
        running.append(total)
    last_positive = max(t for t, w in enumerate(weights) if w > 0)
    return running, last_positive


def draw(sums, u):
    """Inverse CDF over ascending ids: the first t with u * total < running[t] (the largest id of
    positive weight when u * total rounds up to the total). The weights are >= 0, so the running
    sums never decrease and a binary search finds that t."""
    running, last_positive = sums
    threshold = u * running[-1]
    lo, hi = 0, len(running)
    while lo < hi:  # running[t] <= threshold for every t < lo; threshold < running[t] for every t >= hi
        mid = (lo + hi) // 2
        if threshold < running[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo if lo < len(running) else last_positive


def stop_law(p, q, i):
    """The law the emitted token is drawn from when the verification stops at position i: the
    residual max(p_i - q_i, 0) after a rejection (p_i itself if that is all zero), p_k as the bonus."""
    if i == len(q):
        return p[i]
    residual = [a - b if a > b else 0.0 for a, b in zip(p[i], q[i])]
    return residual if any(r > 0 for r in residual) else p[i]


def verify(p, q, drafts, uniforms, sums_at=None):
    """(accepted, token, kind) for one verification; the inputs are already checked.
    ``sums_at(i)``: the running sums of ``stop_law(p, q, i)`` (a batch computes them once for all
    its items, which share p and q)."""
    k = len(drafts)
    if sums_at is None:

        def sums_at(i):
            return running_sums(stop_law(p, q, i))

    for i in range(k):
        x = drafts[i]
        if uniforms[i] * q[i][x] < p[i][x]:
            continue
        return i, draw(sums_at(i), uniforms[k]), "repair"
    return k, draw(sums_at(k), uniforms[k]), "bonus"


def op_sampled(inp):
    p, q, drafts, uniforms = inp["p"], inp["q"], inp["drafts"], inp["uniforms"]
    k = len(drafts) if isinstance(drafts, list) else 0
    vocab = check_shapes(p, q, k)
    check_item(q, drafts, uniforms, k, vocab)
    accepted, token, kind = verify(p, q, drafts, uniforms)
    return {"accepted": accepted, "token": token, "kind": kind}


def op_sampled_batch(inp):
    p, q, all_drafts, all_uniforms = inp["p"], inp["q"], inp["drafts"], inp["uniforms"]
    if not isinstance(all_drafts, list) or not isinstance(all_uniforms, list) or len(all_drafts) != len(all_uniforms):
        raise Rejected("drafts and uniforms must be lists of the same length")
    k = len(q) if isinstance(q, list) else 0
    vocab = check_shapes(p, q, k)
    sums = {}  # position -> running sums of its stop law, shared by every item of the batch

    def sums_at(i):
        if i not in sums:
            sums[i] = running_sums(stop_law(p, q, i))
        return sums[i]

    accepted, tokens, kinds = [], [], []
    for drafts, uniforms in zip(all_drafts, all_uniforms):
        check_item(q, drafts, uniforms, k, vocab)
        a, t, kind = verify(p, q, drafts, uniforms, sums_at)
        accepted.append(a)
        tokens.append(t)
        kinds.append(kind)
    return {"accepted": accepted, "token": tokens, "kind": kinds}


def argmax(row):
    best = 0
    for i, value in enumerate(row):
        if value > row[best]:
            best = i
    return best


def op_greedy(inp):
    p, drafts = inp["p"], inp["drafts"]
    k = len(drafts)
    if k < 1 or not isinstance(p, list) or len(p) != k + 1:
        raise Rejected("greedy needs k >= 1 drafts and k + 1 rows")
    vocab = len(p[0])
    for row in p:
        if len(row) != vocab or not all(is_number(v) for v in row):
            raise Rejected("p rows must be finite numbers of one length")
    for i, x in enumerate(drafts):
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < vocab:
            raise Rejected(f"draft {x!r} is not an id in [0, {vocab})")
        best = argmax(p[i])
        if x != best:
            return {"accepted": i, "token": best, "kind": "repair"}
    return {"accepted": k, "token": argmax(p[k]), "kind": "bonus"}


# --- the target law (llama.cpp's processor order) --------------------------------------------
#   logit bias, repeat penalty (distinct ids of the last repeat_last_n history ids: l/r if l > 0
#   else l*r; 0 disables, -1 = whole history), top-k (order: logit descending, id ascending),
#   top-p (shortest prefix in that order whose softmax mass at temperature 1 is >= top_p), min-p
#   (keep l >= max + log(min_p)), temperature, softmax over the survivors. Temperature 0: one-hot
#   at the argmax (lowest id) of the biased, penalized logits.


def target_law(logits, history, params):
    logits = [float(v) for v in logits]
    vocab = len(logits)
    for token, bias in params["logit_bias"]:
        logits[token] += -math.inf if bias == "-inf" else bias
    penalty, last_n = params["repeat_penalty"], params["repeat_last_n"]
    if penalty != 1.0 and last_n != 0 and history:
        window = history if last_n == -1 else history[-last_n:]
        for token in sorted(set(window)):
            logits[token] = logits[token] / penalty if logits[token] > 0 else logits[token] * penalty
    alive = [t for t in range(vocab) if logits[t] != -math.inf]
    if not alive:
        raise Rejected("every token is banned")
    if params["temperature"] == 0:
        best = max(alive, key=lambda t: (logits[t], -t))
        return [1.0 if t == best else 0.0 for t in range(vocab)]
    order = sorted(alive, key=lambda t: (-logits[t], t))
    top_k = params["top_k"]
    if 0 < top_k < len(order):
        order = order[:top_k]
    if params["top_p"] < 1.0:
        probs = softmax([logits[t] for t in order])
        running, keep = 0.0, len(order)
        for i, mass in enumerate(probs):
            running += mass
            if running >= params["top_p"]:
                keep = i + 1
                break
        order = order[:keep]
    if params["min_p"] > 0.0:
        threshold = max(logits[t] for t in order) + math.log(params["min_p"])
        order = [t for t in order if logits[t] >= threshold]
    survivors = sorted(order)
    probs = softmax([logits[t] / params["temperature"] for t in survivors])
    out = [0.0] * vocab
    for t, mass in zip(survivors, probs):
        out[t] = mass
    return out


def softmax(values):
    top = max(values)
    weights = [math.exp(v - top) for v in values]
    total = sum(weights)
    return [w / total for w in weights]


def check_params(params, vocab):
    if not is_number(params["temperature"]) or params["temperature"] < 0:
        raise Rejected("temperature must be >= 0")
    if not 0.0 < params["top_p"] <= 1.0 or not 0.0 <= params["min_p"] <= 1.0:
        raise Rejected("top_p must be in (0, 1], min_p in [0, 1]")
    if params["top_k"] < 0 or params["repeat_penalty"] <= 0 or params["repeat_last_n"] < -1:
        raise Rejected("bad top_k, repeat_penalty or repeat_last_n")
    for token, _bias in params["logit_bias"]:
        if not 0 <= token < vocab:
            raise Rejected(f"logit_bias id {token} outside the vocabulary")


def op_target_law(inp):
    logits, history, params = inp["logits"], inp["history"], inp["params"]
    if not logits or not all(is_number(v) for v in logits):
        raise Rejected("logits must be finite numbers")
    check_params(params, len(logits))
    return {"probs": target_law(logits, history, params)}


def op_rows(inp):
    target_logits, draft_logits = inp["target_logits"], inp["draft_logits"]
    history, drafts = inp["history"], inp["drafts"]
    k = len(drafts)
    if len(target_logits) != k + 1 or len(draft_logits) != k:
        raise Rejected("need k + 1 target rows and k draft rows")
    tp, dp = inp["target_params"], inp["draft_params"]
    for rows in (target_logits, draft_logits):
        for row in rows:
            if not all(is_number(v) for v in row):
                raise Rejected("logits must be finite numbers")
            check_params(tp, len(row))
            check_params(dp, len(row))
    # row i sees the history plus the drafts before it; q is the draft's own (exact) law
    p = [target_law(target_logits[i], history + drafts[:i], tp) for i in range(k + 1)]
    q = [target_law(draft_logits[i], history + drafts[:i], dp) for i in range(k)]
    return {"p": p, "q": q, "mode": "greedy" if tp["temperature"] == 0 else "sampled"}


def op_conformal_index(inp):
    """ceil((n + 1) q) in integer arithmetic (q is an exact decimal or a/b string); null if > n."""
    n, level = inp["n"], inp["q"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or not isinstance(level, str):
        raise Rejected("n must be an int >= 1 and q a string")
    if "/" in level:
        num_text, den_text = level.split("/")
        num, den = int(num_text), int(den_text)
    else:
        whole, _, frac = level.partition(".")
        num, den = int(whole + frac), 10 ** len(frac)
    if not 0 < num < den:
        raise Rejected(f"q = {level} is not in (0, 1)")
    index = -((-(n + 1) * num) // den)
    return {"index": index if index <= n else None}


OPS = {
    "sampled": op_sampled,
    "sampled_batch": op_sampled_batch,
    "greedy": op_greedy,
    "rows": op_rows,
    "target_law": op_target_law,
    "conformal_index": op_conformal_index,
}


def main():
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        request_id = None
        try:
            request = json.loads(line)
            request_id = request["id"]
            handler = OPS.get(request["op"])
            if handler is None:
                response = {"id": request_id, "unsupported": request["op"]}
            else:
                response = {"id": request_id, "output": handler(request["input"])}
        except Exception as exc:  # contract violations and malformed input alike are rejections
            response = {"id": request_id, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(response) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
