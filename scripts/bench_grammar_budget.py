"""Benchmark: the constraint grammar with the call budget encoded (``workflow_grammar(...,
budget=True)``: rules indexed by their exact worst-case call count) against the plain one, on
the SmolLM2 tokenizer and 60 valid workflows: grammar compile, matcher creation, and the mask
plus advancing the matcher per position (docs/CONSTRAINED.md). Run from outside the repository
root::

    python /path/to/scripts/bench_grammar_budget.py
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import llguidance
import llguidance.torch as llt
from transformers import AutoTokenizer

from flowgrpo.dsl import validate
from flowgrpo.dsl.constrained import workflow_grammar
from flowgrpo.dsl.generate import random_workflow
from flowgrpo.operators.models import default_model_path
from flowgrpo.trainer.loop.constrain import grammar_tokenizer

VOCAB, ROWS, WORKFLOWS = 49152, 16, 60


def _workflows() -> list[str]:
    rng, texts = random.Random(1), []
    while len(texts) < WORKFLOWS:
        report = validate(random_workflow(rng), domain="math")
        if report.ok:
            texts.append(report.canonical)
    return texts


def _measure(ll, tok, grammar_text: str, texts: list[str]) -> dict:
    start = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_lark(grammar_text)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(ROWS):
        llguidance.LLMatcher(ll, grammar, log_level=1)
    matcher_s = (time.perf_counter() - start) / ROWS
    bits, times = llt.allocate_token_bitmask(1, VOCAB), []
    for text in texts:
        matcher = llguidance.LLMatcher(ll, grammar, log_level=1)
        for token in tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]:
            start = time.perf_counter()
            llt.fill_next_token_bitmask(matcher, bits, 0)
            if not matcher.consume_token(token):
                raise RuntimeError(f"the grammar rejected {text!r}")
            times.append(time.perf_counter() - start)
    times.sort()
    return {
        "compile ms": 1000 * compile_s,
        "matcher ms": 1000 * matcher_s,
        "median ms": 1000 * statistics.median(times),
        "mean ms": 1000 * statistics.mean(times),
        "p99 ms": 1000 * times[int(0.99 * len(times))],
        "positions": len(times),
    }


def main(argv=None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)  # --help
    directory, filename = default_model_path()
    tok = AutoTokenizer.from_pretrained(directory, gguf_file=filename)
    ll = grammar_tokenizer(tok, VOCAB, [tok.eos_token_id])
    texts = _workflows()
    print("| grammar | compile ms | matcher ms | median ms | mean ms | p99 ms | positions |")
    for name, budget in (("plain", False), ("call budget encoded", True)):
        row = _measure(ll, tok, workflow_grammar("math", budget=budget), texts)
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in row.values()) + " |")


if __name__ == "__main__":
    main()
