"""The workflow grammar as a sampling constraint: a sub-language of ``workflow.lark`` for one
domain and operator table, written as a Lark grammar for an incremental token matcher
(llguidance, see docs/CONSTRAINED.md).

Every string the constraint grammar accepts parses with ``workflow.lark`` and passes
:func:`~flowgrpo.dsl.validate.validate` for its domain, except for the call budget
(``too_many_calls``), which a context-free grammar can count only with rules per call count
(``budget=True``: exact, but too slow to sample with); the sampler keeps it with its end game
(:mod:`dsl.closing`, ``trainer/loop/endgame.py``) and ``validate`` still checks it.
The rules it encodes, beyond the syntax:

* operators: only the table's names allowed for the domain (user operators included), by role;
  an instruction ``("...")`` only on operators that take one (at most 48 characters);
* ``needs_solution``: a sequence that has no solution yet starts with a generator (or a
  parallel block, or a group, whose every branch does); checkers and refiners come later;
* ``ensemble_needs_candidates``: an ensembler only right after a parallel block;
* ``condition_not_checker``: the condition of ``?`` is a checker;
* ``loop_count`` and ``too_deep``: counts 1..max_loop_count, nesting at most max_depth
  (one rule family per remaining depth);
* the canonical spacing (``A -> B``, ``[A, B]``, ``X ? Y : done``, ``(A) * 2``), so the
  policy spends no probability on whitespace.

Pure text: no matcher is imported here (the dsl package has no heavy dependencies).
"""

from __future__ import annotations

from flowgrpo.dsl.operators import CHECKER, ENSEMBLER, GENERATOR, REFINER, OperatorTable
from flowgrpo.dsl.operators import default_table as _default_table
from flowgrpo.dsl.validate import DEFAULT_STATIC_LIMITS, StaticLimits, heavy_operators

# printable only: a control character (\r, \t, \x0c, ...) in an instruction is legal for the
# grammar's regex but breaks extraction's line handling (a sample would be a fallback)
_STRING = r'/"[^"\\\x00-\x1f\x7f]{0,48}"/'


def _names(table: OperatorTable, allowed, role: str, instruction: bool) -> list[str]:
    return [
        n
        for n in table.names_with_role(role)
        if n in allowed and table[n].takes_instruction == instruction
    ]


def _op_rule(name: str, table: OperatorTable, allowed, roles: tuple[str, ...]) -> str | None:
    """``name: "A" | "B" ("(" STRING ")")?`` for the operators of ``roles``; None when empty."""
    alts = []
    for instruction in (False, True):
        names = [n for r in roles for n in _names(table, allowed, r, instruction)]
        if names:
            lits = " | ".join(f'"{n}"' for n in names)
            alts.append(f'({lits}) ("(" STRING ")")?' if instruction else f"({lits})")
    return f"{name}: " + " | ".join(alts) if alts else None


def _depth_rules(d: int, has: dict) -> list[str]:
    """Rules of remaining depth ``d`` for both families: h (no solution yet), s (a solution)."""
    rules = []
    for f in ("h", "s"):
        units = [f"op_{f}", f'"(" seq_{f}{d} ")"']
        steps = [f"unit_{f}{d}"]
        if d > 0:
            units.append(f"par_{f}{d}")
            steps.append(f'unit_{f}{d - 1} " * " COUNT')
            if has["ens"]:
                steps.append(f'par_{f}{d} " -> " op_ens')
            if f == "s" and has["chk"]:
                steps.append(f'op_chk " ? " branch{d - 1} " : " branch{d - 1}')
            rules.append(f'par_{f}{d}: "[" seq_{f}{d - 1} (", " seq_{f}{d - 1})+ "]"')
        rules.append(f"unit_{f}{d}: " + " | ".join(units))
        rules.append(f"step_{f}{d}: " + " | ".join(steps))
        rules.append(f'seq_{f}{d}: step_{f}{d} (" -> " step_s{d})*')
    rules.append(f'branch{d}: unit_s{d} | "done"')
    return rules


def _budget_rules(f: str, d: int, budget: int, weights: dict, loops: int) -> list[str]:
    """Rules of family ``f`` at remaining depth ``d`` indexed by their exact worst-case call
    count c = 1..budget (``shape.count_calls``: a chain and a parallel block add, a loop
    multiplies, a conditional is its check plus its longer branch; an operator counts its
    ``StaticLimits.op_calls``, else its declared ``calls``). ``weights``: the calls the
    operators of each kind count."""
    rules = []
    for c in range(1, budget + 1):
        units = [f"op_{f}_w{c}"] if c in weights[f] else []
        units.append(f'"(" seq_{f}{d}_{c} ")"')
        steps = [f"unit_{f}{d}_{c}"]
        if d > 0:
            if c >= 2:
                units.append(f"par_{f}{d}_{c}")
            loop = [n for n in range(1, loops + 1) if c % n == 0]
            steps += [f'unit_{f}{d - 1}_{c // n} " * {n}"' for n in loop]
            ens = [w for w in weights["ens"] if c - w >= 2]  # after >= 2 branches
            steps += [f'par_{f}{d}_{c - w} " -> " op_ens_w{w}' for w in ens]
            for w in weights["chk"] if f == "s" else ():
                m, b = c - w, f"branch{d - 1}"
                if m >= 0:
                    steps.append(f'op_chk_w{w} " ? " {b}_{m} " : " {b}le_{m}')
                if m > 0:
                    steps.append(f'op_chk_w{w} " ? " {b}le_{m - 1} " : " {b}_{m}')
            if c >= 2:
                e = d - 1
                heads = [f'"[" seq_{f}{e}_{a} ", " plist_{f}{e}_{c - a} "]"' for a in range(1, c)]
                rules.append(f"par_{f}{d}_{c}: " + " | ".join(heads))
        splits = range(1, c)
        seqs = [f"step_{f}{d}_{c}", *(f'step_{f}{d}_{a} " -> " seq_s{d}_{c - a}' for a in splits)]
        plist = [f"seq_{f}{d}_{c}", *(f'seq_{f}{d}_{a} ", " plist_{f}{d}_{c - a}' for a in splits)]
        named = {"unit": units, "step": steps, "seq": seqs, "plist": plist}
        rules += [f"{name}_{f}{d}_{c}: " + " | ".join(alts) for name, alts in named.items()]
    return rules


def _branch_rules(d: int, budget: int) -> list[str]:
    """``branch{d}_{m}``: a branch of exactly m calls ("done" is 0); ``branch{d}le_{m}``: at
    most m."""
    rules = [f'branch{d}_0: "done"', f"branch{d}le_0: branch{d}_0"]
    for m in range(1, budget):
        rules.append(f"branch{d}_{m}: unit_s{d}_{m}")
        rules.append(f"branch{d}le_{m}: branch{d}le_{m - 1} | branch{d}_{m}")
    return rules


_KINDS = {  # rule name: the roles of its operators
    "h": (GENERATOR,),
    "s": (GENERATOR, CHECKER, REFINER),
    "chk": (CHECKER,),
    "ens": (ENSEMBLER,),
}


def _budget_grammar(table: OperatorTable, allowed, limits: StaticLimits) -> list[str]:
    """The grammar with the call budget: one operator rule per kind and call count
    (``op_s_w2``: the generators, checkers and refiners that count two calls)."""
    budget, top = limits.max_calls, limits.max_depth
    starts = " | ".join(f"seq_h{top}_{c}" for c in range(1, budget + 1))
    lines, weights = [f"start: {starts}"], {}
    by_weight: dict[int, set[str]] = {}
    for name in allowed:
        by_weight.setdefault(heavy_operators(table, limits).get(name, 1), set()).add(name)
    for kind, roles in _KINDS.items():
        rules = {w: _op_rule(f"op_{kind}_w{w}", table, names, roles)
                 for w, names in by_weight.items()}  # fmt: skip
        weights[kind] = sorted(w for w, rule in rules.items() if rule is not None)
        lines += [rules[w] for w in weights[kind]]
    for d in range(top + 1):
        for f in ("h", "s"):
            lines += _budget_rules(f, d, budget, weights, limits.max_loop_count)
        if d < top:
            lines += _branch_rules(d, budget)
    return lines


def workflow_grammar(
    domain: str,
    operators: OperatorTable | None = None,
    limits: StaticLimits | None = None,
    budget: bool = False,
) -> str:
    """The Lark text of the constraint grammar for ``domain`` (see the module docstring).

    ``operators``: the run's table (None: the process-wide table); ``limits``: the validator's
    bounds (None: the defaults). ``budget``: also encode the call budget (``max_calls``) with
    rules indexed by their exact worst-case call count, so that every accepted string passes
    ``validate``; exact, but its text is about 95x longer and, with llguidance, 36x slower to
    start a matcher and 80x slower per token on average (scripts/bench_grammar_budget.py), so
    the sampler does not use it. Raises ValueError when the domain has no generator (no workflow
    can be valid then).
    """
    table = operators if operators is not None else _default_table()
    limits = limits if limits is not None else DEFAULT_STATIC_LIMITS
    allowed = table.for_domain(domain)
    op_rules = {f"op_{kind}": _op_rule(f"op_{kind}", table, allowed, roles)
                for kind, roles in _KINDS.items()}  # fmt: skip
    if op_rules["op_h"] is None:
        raise ValueError(f"the {domain} domain has no generator: no workflow can be valid")
    has = {"chk": op_rules["op_chk"] is not None, "ens": op_rules["op_ens"] is not None}
    if budget:
        lines = _budget_grammar(table, allowed, limits)
        return "\n".join([*lines, f"STRING: {_STRING}"]) + "\n"
    top = limits.max_depth
    counts = " | ".join(f'"{i}"' for i in range(1, limits.max_loop_count + 1))
    lines = [f"start: seq_h{top}", *[r for r in op_rules.values() if r is not None]]
    for d in range(top + 1):
        lines += _depth_rules(d, has)
    lines += [f"COUNT: {counts}", f"STRING: {_STRING}"]
    return "\n".join(lines) + "\n"
