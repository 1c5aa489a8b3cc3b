"""How far lookup drafts can go on a model's own text: the ceiling no draft controller can pass.

    OPENBLAS_NUM_THREADS=1 python -m lab.lookup_ceiling MODEL [--per-category 2] [--tokens 128]

Decodes the first ``--per-category`` requests of each category of ``verispec/data/workload.jsonl``
plainly (int8 engine, chat-formatted, ended by the end of turn), greedy and at T = 0.8, then
replays each output position by position and asks the lookup proposers what they would have
proposed from the text before it (no model work in the replay):

    ngram_proposed / ngram_hit    prompt lookup (n = 4..2) had a token / it was the committed one
    suffix_proposed               the suffix tree (contexts of one token or more) had a continuation
    suffix_top1 / suffix_top4     the committed token was its most frequent / among its four most
                                  frequent continuations
    chain_tokens                  accepted tokens of the suffix walk's 4-token chain (the prefix that
                                  equals what was committed)

All as fractions of the positions (chain_tokens: tokens a position). At T = 0.8 the committed
token at a position has the target's law, so ``suffix_top4`` estimates the acceptance of a
four-sibling deterministic tree below the root (the sum of their target probabilities), and
``chain_tokens`` the accepted tokens of a chain a cycle: tokens a target pass cannot exceed
1 + what the proposers can match.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from verispec.engine.generate import generate as fast_generate
from verispec.engine.model import FastModel
from verispec.reference.chat import chat_format
from verispec.reference.drafts import lookup
from verispec.reference.generate import GenerationRequest
from verispec.reference.gguf import GGUFFile
from verispec.reference.sampling import SamplingParams
from verispec.reference.suffix_draft import SuffixTree, continuations, walk_steps
from verispec.reference.tokenizer import Tokenizer
from verispec.workload import load_workload


def replay(prompt: list[int], output: list[int], stats: Counter[str]) -> None:
    """Count, at each output position, what the proposers would have proposed and matched."""
    history = list(prompt)
    tree = SuffixTree()
    for t in history:
        tree.append(t)
    for i, token in enumerate(output):
        stats["positions"] += 1
        ngram = lookup(history, 1, 4, 2)
        stats["ngram_proposed"] += bool(ngram)
        stats["ngram_hit"] += bool(ngram) and ngram[0] == token
        found = [t for t, *_ in continuations([tree], history, None, 4, 16, 1)]
        stats["suffix_proposed"] += bool(found)
        stats["suffix_top1"] += bool(found) and found[0] == token
        stats["suffix_top4"] += token in found
        chain = [s.token for s in walk_steps([tree], history, 4, 16, 1)]
        matched = 0
        for proposed, committed in zip(chain, output[i:]):
            if proposed != committed:
                break
            matched += 1
        stats["chain_tokens"] += matched
        history.append(token)
        tree.append(token)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args(argv)
    with GGUFFile.open(Path(args.model)) as f:
        model = FastModel.load(f, weights="int8")
        tokenizer = Tokenizer.from_gguf(f.metadata)
        chat = chat_format(f.metadata)
    end = tokenizer.token_id(chat.end_of_turn)
    seen: Counter[str] = Counter()
    stats = {0.0: Counter[str](), 0.8: Counter[str]()}
    for item in load_workload():
        seen[item.category] += 1
        if seen[item.category] > args.per_category:
            continue
        ids = tuple(tokenizer.encode(item.prompt_text(chat), add_bos=tokenizer.add_bos, parse_special=True))
        for temperature, counts in stats.items():
            request = GenerationRequest(
                ids,
                params=SamplingParams(temperature=temperature),
                max_tokens=args.tokens,
                seed=0,
                stop_ids=frozenset() if end is None else frozenset({end}),
            )
            replay(list(ids), list(fast_generate(model, tokenizer, request).ids), counts)
    out = {
        str(t): {k: round(v / max(1, c["positions"]), 3) for k, v in c.items() if k != "positions"}
        | {"positions": c["positions"]}
        for t, c in stats.items()
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
