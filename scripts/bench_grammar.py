"""Benchmark: grammar token-mask libraries side by side (issue 24: choose by measurement).

llguidance (as the trainer uses it, and with ``no_forcing``), xgrammar and transformers-cfg on the
same inputs: ``workflow_grammar("math")`` (Lark; EBNF for the other two by :func:`lark_to_ebnf`),
the SmolLM2-135M tokenizer, and ``--n`` workflows that llguidance accepts, tokenized, ended by
EOS. Times compile, matcher creation and, per position, the mask plus advancing by the token;
counts the positions where the allowed sets agree. Usage (not from the repo root)::

    python /work/main/scripts/bench_grammar.py [--n 200] [--budget 90]
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import time
from importlib.metadata import version

import numpy as np
import torch

from flowgrpo.dsl import canonical, default_table
from flowgrpo.dsl.constrained import workflow_grammar
from flowgrpo.dsl.generate import random_workflow, stratified_workflow
from flowgrpo.operators.models import default_model_path

EXTRA = [  # instruction strings: empty, 48 characters (the most), not ASCII
    *('Custom("check units")', 'Custom("check units") -> Review ? Revise : done'),
    *('Programmer("use sympy, exact fractions") -> Format', 'Custom("") -> Revise("shorter")'),
    '[Custom("guess"), AnswerGenerate] -> ScEnsemble -> Review("signs?") ? Revise : done',
    *('Custom("' + "x" * 48 + '")', 'AnswerGenerate("3 × 4 in °C") -> Format'),
]
_QUOTED_CLASS = re.compile(r'/"(\[[^\]]*\])\{0,(\d+)\}"/')  # /"[...]{0,n}"/, as STRING


def lark_to_ebnf(lark: str) -> str:
    """The constraint grammar's Lark text as EBNF (xgrammar) / GBNF (transformers-cfg):
    ``name: alts`` -> ``name ::= alts``, ``start`` -> ``root``, the one regex terminal (STRING)
    ``/"[class]{0,n}"/`` -> ``"\\"" ([class]{1,n})? "\\""`` (transformers-cfg 0.2.7 reads ``{0,n}``
    as ``{1,n}``); quoted literals (COUNT), groups and ``| ? * +`` read the same in all three."""
    out = []
    for line in filter(str.strip, lark.splitlines()):
        rule = re.fullmatch(r"(\w+):\s*(.*)", line)
        if rule is None:
            raise ValueError(f"not a plain rule: {line!r}")
        name, body = rule.groups()
        if body.startswith("/"):
            if (rx := _QUOTED_CLASS.fullmatch(body)) is None:
                raise ValueError(f"regex not translated: {line!r}")
            body = f'"\\"" ({rx[1]}{{1,{rx[2]}}})? "\\""'
        body = re.sub(r"\bstart\b", "root", body)
        out.append(f"{'root' if name == 'start' else name} ::= {body}")
    return "\n".join(out) + "\n"


class Llg:
    """A library: ``compile`` once, ``start`` a matcher per row; per position ``mask`` (timed),
    ``allowed`` (bool [V], not timed), ``advance`` by the token (timed)."""

    name, package, header = "llguidance", "llguidance", ""

    def __init__(self, tok, vocab: int):
        import llguidance
        import llguidance.torch

        from flowgrpo.trainer.loop.constrain import grammar_tokenizer

        self.llg, self.llt, self.vocab = llguidance, llguidance.torch, vocab
        self.lltok = grammar_tokenizer(tok, vocab, [tok.eos_token_id])
        self.bits = self.llt.allocate_token_bitmask(1, vocab)

    def compile(self, lark: str) -> None:  # llguidance builds its parser in the matcher
        self.grammar = self.llg.LLMatcher.grammar_from_lark(self.header + lark)
        if (m := self.start()).is_error():
            raise ValueError(m.get_error())

    def start(self):
        return self.llg.LLMatcher(self.lltok, self.grammar, log_level=1)

    def mask(self, m):
        self.llt.fill_next_token_bitmask(m, self.bits, 0)
        return self.bits

    def allowed(self, raw) -> np.ndarray:
        if raw.dtype == torch.bool:  # transformers-cfg: a bool tensor already
            return raw.numpy()
        bits = np.unpackbits(raw[0].numpy().view(np.uint8), bitorder="little")
        return bits[: self.vocab].astype(bool)

    def advance(self, m, tok: int):
        if not m.consume_token(tok):
            raise ValueError(m.get_error())
        return m


class LlgFree(Llg):  # the model may tokenize forced text its own way
    name, header = "llguidance no_forcing", '%llguidance {"no_forcing": true}\n'


class Xgr(Llg):
    name, package = "xgrammar", "xgrammar"

    def __init__(self, tok, vocab: int):
        import xgrammar

        self.xgr, self.vocab = xgrammar, vocab
        self.info = xgrammar.TokenizerInfo.from_huggingface(
            tok, vocab_size=vocab, stop_token_ids=[tok.eos_token_id]
        )
        self.bits = xgrammar.allocate_token_bitmask(1, vocab)

    def compile(self, lark: str) -> None:  # one thread: the machine has two, both busy
        compiler = self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        self.compiled = compiler.compile_grammar(lark_to_ebnf(lark))

    def start(self):
        return self.xgr.GrammarMatcher(self.compiled)

    def mask(self, m):
        m.fill_next_token_bitmask(self.bits)
        return self.bits

    def advance(self, m, tok: int):
        if not m.accept_token(tok):
            raise ValueError(f"token {tok} rejected")
        return m


class _Bytes(list):
    """transformers-cfg's token -> bytes map ("homomorphism"), indexed by token id."""

    def map(self, token_id: int, verbose: bool = False) -> bytes:
        return self[int(token_id)]


def _byte_vocab(tok, vocab: int) -> _Bytes:
    """Each token's bytes (GPT-2 byte-level pieces decoded); b"" for ``all_special_ids``, the
    tokens transformers-cfg's own GPT-2 mapping leaves out."""
    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
    cs = bs + [256 + n for n in range(256 - len(bs))]
    dec = {chr(c): b for b, c in zip(bs + [b for b in range(256) if b not in bs], cs)}
    pieces, special = tok.convert_ids_to_tokens(list(range(vocab))), set(tok.all_special_ids)
    return _Bytes(b"" if i in special else bytes(map(dec.get, p)) for i, p in enumerate(pieces))


class Tcfg(Llg):
    name, package = "transformers-cfg", "transformers-cfg"

    def __init__(self, tok, vocab: int):
        from transformers_cfg.tokenization.byte_trie import ByteTrie

        self.tok, self.eos, self.note = tok, tok.eos_token_id, ""
        try:
            self.trie, self.hom = ByteTrie.from_tokenizer(tok), None
        except Exception as e:  # transformers 5's TokenizersBackend is not in its list
            self.note = f"own byte-level tokenizer adapter ({type(e).__name__}: {e})"
            self.hom, self.trie = _byte_vocab(tok, vocab), ByteTrie()
            for i, b in enumerate(self.hom):
                if b:
                    self.trie.insert(b, i)
            self.trie.vocab_size = vocab

    def compile(self, lark: str) -> None:
        from transformers_cfg.token_grammar_recognizer import IncrementalTokenRecognizer

        ebnf = lark_to_ebnf(lark)
        self.rec = IncrementalTokenRecognizer(ebnf, "root", self.tok, self.trie, self.hom)

    def start(self):
        return self.rec.string_recognizer.get_initial_parsing_state()

    def mask(self, state):
        return self.rec.filter_vocab(state, torch.device("cpu"))

    def advance(self, state, tok: int):
        # AcceptState.can_stop() looks at one stack only: EOS is checked here (any empty stack)
        if tok == self.eos and any(len(s) == 0 for s in state.stacks):
            return self.rec.string_recognizer.get_termination_parsing_state()
        state = self.rec._update_state_with_token_id(tok, state)
        if not state.stacks:
            raise ValueError(f"token {tok} rejected")
        return state


def setup(lark: str, tok, vocab: int) -> tuple[list, dict]:
    """The libraries that set up and compiled, and per library its times or its error."""
    live, info = [], {}
    for cls in (Llg, LlgFree, Xgr, Tcfg):
        row = info[cls.name] = {}
        try:  # a library not installed is a row with its error, as a failing one is
            row["version"] = version(cls.package)
            t0 = time.perf_counter()
            lib = cls(tok, vocab)
            t1 = time.perf_counter()
            lib.compile(lark)
            row.update(
                setup=t1 - t0, compile=time.perf_counter() - t1, note=getattr(lib, "note", "")
            )
            live.append(lib)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
    return live, info


def workflows(n: int, seed: int, llg: Llg, tok) -> list[list[int]]:
    """Token ids (+ EOS) of ``n`` distinct workflows that llguidance's matcher accepts in full,
    the fixed :data:`EXTRA` among them, in a random order."""
    rng, table, texts, out = random.Random(seed), default_table(), dict.fromkeys(EXTRA), []
    for _ in range(50 * n):
        if rng.random() < 0.5:
            texts.setdefault(stratified_workflow(rng, table, "math"))
        else:
            texts.setdefault(canonical(random_workflow(rng, valid_only=True, domain="math")))
        if len(texts) >= 2 * n:
            break
    for text in texts:
        ids = [*tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id]
        m = llg.start()
        if len(out) < n and all(m.consume_token(t) for t in ids) and m.is_stopped():
            out.append(ids)
    return rng.sample(out, len(out))


def follow(libs: list, seqs: list[list[int]], tok, budget: float) -> dict:
    """Every library follows every sequence in lockstep (until its mask time passes ``budget``
    seconds); per library the times, per pair of libraries the agreement counts."""
    st = {lib.name: {"t": [], "new": [], "fail": ""} for lib in libs}
    special = np.zeros(len(tok), dtype=bool)
    special[list(tok.added_tokens_decoder)] = True
    pairs = {p: [0, 0, 0, []] for p in itertools.combinations([lib.name for lib in libs], 2)}
    for ids in seqs:
        ms = {}
        for lib in libs:
            if not st[lib.name]["fail"] and sum(st[lib.name]["t"]) < budget:
                t0 = time.perf_counter()
                ms[lib.name] = lib.start()
                st[lib.name]["new"].append(time.perf_counter() - t0)
        for pos, tok_id in enumerate(ids):
            sets = {}
            for lib in [lib for lib in libs if lib.name in ms and sum(st[lib.name]["t"]) < budget]:
                t0 = time.perf_counter()
                raw = lib.mask(ms[lib.name])
                t1 = time.perf_counter()
                sets[lib.name] = lib.allowed(raw)
                t2 = time.perf_counter()
                try:
                    ms[lib.name] = lib.advance(ms[lib.name], tok_id)
                except Exception as e:
                    st[lib.name]["fail"] = f"{tok.decode(ids[:pos])!r} + {tok_id}: {e}"
                    del ms[lib.name]
                st[lib.name]["t"].append(t1 - t0 + time.perf_counter() - t2)
            _compare(sets, pairs, special, tok, ids[:pos])
    return {"libs": st, "pairs": pairs}


def _compare(sets: dict, pairs: dict, special: np.ndarray, tok, prefix: list[int]) -> None:
    """Per pair: positions, exact agreements, agreements outside the added tokens, examples."""
    for (a, b), row in pairs.items():
        if a in sets and b in sets:
            diff = sets[a] != sets[b]
            row[0] += 1
            row[1] += not diff.any()
            row[2] += not diff[~special].any()
            if diff[~special].any() and len(row[3]) < 2:
                only = [np.flatnonzero(diff & sets[x] & ~special)[:5].tolist() for x in (a, b)]
                a_, b_ = (tok.convert_ids_to_tokens(o) for o in only)
                row[3].append(f"after {tok.decode(prefix)!r}: only {a} {a_}, only {b} {b_}")


def report(info: dict, res: dict) -> None:
    """The markdown tables (x: time / llguidance's time), then errors, notes and examples."""
    st, ref = res["libs"], None
    print("| library | version | tokenizer setup (s) | compile (ms) | x | new matcher (ms) | x "
          "| mask+advance median (ms) | x | mean (ms) | x | p99 (ms) | positions |")  # fmt: skip
    print("|" + "---|" * 13)
    for name, row in info.items():
        if "error" in row:
            print(f"| {name} | {row['version']} | failed, see below |" + " |" * 10)
            continue
        t = np.array(st[name]["t"])
        vals = [row["compile"], np.median(st[name]["new"]), np.median(t), t.mean()]
        ref = ref or vals
        cells = " | ".join(f"{1e3 * v:.3f} | {v / r:.2f}" for v, r in zip(vals, ref))
        p99 = 1e3 * np.percentile(t, 99)
        print(
            f"| {name} | {row['version']} | {row['setup']:.2f} | {cells} | {p99:.3f} | {len(t)} |"
        )
    print("\n| pair | positions | identical allowed sets | identical outside the added tokens |")
    print("|---|---|---|---|")
    for (a, b), (n, same, same_ns, _) in res["pairs"].items():
        print(f"| {a} / {b} | {n} | {same / max(n, 1):.3f} | {same_ns / max(n, 1):.3f} |")
    notes = [
        (n, [r.get("error"), r.get("note"), st.get(n, {}).get("fail")]) for n, r in info.items()
    ]
    for name, lines in notes + [(" / ".join(p), row[3]) for p, row in res["pairs"].items()]:
        print("".join(f"- {name}: {line}\n" for line in lines if line), end="")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="workflows to follow")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=90.0, help="mask seconds per library")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoTokenizer

    directory, gguf_file = default_model_path()
    tok = AutoTokenizer.from_pretrained(directory, gguf_file=gguf_file)
    libs, info = setup(workflow_grammar("math"), tok, len(tok))
    if not libs or libs[0].name != "llguidance":
        raise SystemExit(f"llguidance is needed to draw the inputs: {info['llguidance']}")
    seqs = workflows(args.n, args.seed, libs[0], tok)
    quoted = sum('("' in tok.decode(ids) for ids in seqs)
    n_pos, vocab = sum(map(len, seqs)), len(tok)
    print(f"{len(seqs)} workflows ({quoted} with an instruction), {n_pos} positions, V={vocab}\n")
    report(info, follow(libs, seqs, tok, args.budget))


if __name__ == "__main__":
    main()
