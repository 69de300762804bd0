"""The policy's prompt: the problem plus a description of the DSL, in one place.

The operator list is generated from ``dsl.OPERATORS`` (filtered by the problem's domain), so the
prompt never disagrees with the validator.
"""

from __future__ import annotations

from dsl import OPERATORS, operators_for_domain
from operators.tasks.base import Problem

SYSTEM = (
    "You design workflows that solve problems. A workflow is one line in this language:\n"
    "  A -> B            run A, then B\n"
    "  [A, B, C] -> E    run A, B, C separately, then E picks the best (E: ScEnsemble or "
    "MdEnsemble)\n"
    "  X ? A : B         X checks the solution (Review or Test); if it finds a problem run A, "
    "else B; 'done' does nothing\n"
    "  (A -> B) * 2      repeat up to 2 times, stopping once a check passes\n"
    "Operators:\n{operators}\n"
    "Examples:\n{examples}\n"
    "Answer with the workflow only, on one line."
)

EXAMPLES = {
    "math": (
        "Custom -> Programmer -> Review ? Revise : done",
        "[Custom, Custom, Programmer] -> ScEnsemble -> Format",
        "AnswerGenerate -> (Review -> Revise) * 2",
    ),
    "code": (
        "CustomCodeGenerate -> Test ? Revise : done",
        "[CustomCodeGenerate, CustomCodeGenerate] -> ScEnsemble -> Test ? Revise : done",
        "CustomCodeGenerate -> (Review -> Revise) * 2",
    ),
    "qa": (
        "AnswerGenerate -> Review ? Revise : done -> Format",
        "[AnswerGenerate, AnswerGenerate, Custom] -> ScEnsemble",
        "Custom -> (Review -> Revise) * 2",
    ),
}


def system_prompt(domain: str) -> str:
    """The system message for problems of ``domain`` (math, code or qa)."""
    allowed = operators_for_domain(domain)
    lines = "\n".join(
        f"  {name}: {spec.summary}" for name, spec in OPERATORS.items() if name in allowed
    )
    examples = "\n".join(f"  {e}" for e in EXAMPLES[domain])
    return SYSTEM.format(operators=lines, examples=examples)


def user_prompt(problem: Problem) -> str:
    return f"Problem:\n{problem.question.strip()}\n\nWorkflow:"


def build_messages(problem: Problem) -> list[dict]:
    return [
        {"role": "system", "content": system_prompt(problem.domain)},
        {"role": "user", "content": user_prompt(problem)},
    ]


def render_prompt(problem: Problem, tokenizer) -> str:
    """The prompt text with the tokenizer's chat template (plain text when it has none)."""
    messages = build_messages(problem)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in messages) + " "
