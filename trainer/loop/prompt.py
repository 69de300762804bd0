"""The policy's prompt: a short instruction, the domain's operators, and three worked examples
as chat turns (few-shot), then the problem. Everything the policy is told lives here.

Short on purpose: on a CPU every prompt token is paid K times per step in generation, and a
135M model imitates examples far better than it follows a long description. Measured with the
untrained SmolLM2-135M-Instruct (4 problems x 8 samples, 32 new tokens, temperature 0.8): a long
syntax description gave 100% prose (fallback); this few-shot prompt gives about 50% fallback and
a few valid workflows, enough spread for group-relative advantages.
The operator list is generated from ``dsl.OPERATORS`` (filtered by domain), so the prompt never
disagrees with the validator; every example is checked by a test to be valid for its domain.
"""

from __future__ import annotations

from flowgrpo.dsl import OPERATORS, operators_for_domain
from flowgrpo.operators.tasks.base import Problem

SYSTEM = "Reply with a workflow: operators joined by ->. Operators: {operators}."

EXAMPLES = {
    "math": (
        (
            "Tom has 3 apples and buys 5 more. How many apples does he have?",
            "Custom -> Programmer -> Review ? Revise : done",
        ),
        ("A box holds 12 pens. How many pens are in 4 boxes?", "AnswerGenerate -> Format"),
        (
            "Sara reads 15 pages a day for 6 days. How many pages does she read?",
            "[Custom, Custom, Programmer] -> ScEnsemble",
        ),
    ),
    "code": (
        (
            "Write a function add(a, b) that returns the sum of a and b.",
            "CustomCodeGenerate -> Test ? Revise : done",
        ),
        (
            "Write a function is_even(n) that tells whether n is even.",
            "[CustomCodeGenerate, CustomCodeGenerate] -> ScEnsemble -> Test ? Revise : done",
        ),
        (
            "Write a function reverse(s) that reverses a string.",
            "CustomCodeGenerate -> (Review -> Revise) * 2",
        ),
    ),
    "qa": (
        ("What is the capital of France?", "AnswerGenerate -> Format"),
        ("Who wrote Hamlet?", "[AnswerGenerate, AnswerGenerate, Custom] -> ScEnsemble"),
        ("Which planet is largest?", "Custom -> Review ? Revise : done -> Format"),
    ),
}


def system_prompt(domain: str) -> str:
    """The system message for problems of ``domain`` (math, code or qa)."""
    allowed = operators_for_domain(domain)
    return SYSTEM.format(operators=", ".join(n for n in OPERATORS if n in allowed))


def build_messages(problem: Problem) -> list[dict]:
    """System message, the domain's examples as user/assistant turns, then the problem."""
    messages = [{"role": "system", "content": system_prompt(problem.domain)}]
    for question, workflow in EXAMPLES[problem.domain]:
        messages += [
            {"role": "user", "content": f"Problem: {question}"},
            {"role": "assistant", "content": workflow},
        ]
    messages.append({"role": "user", "content": f"Problem: {problem.question.strip()}"})
    return messages


def render_prompt(problem: Problem, tokenizer) -> str:
    """The prompt text with the tokenizer's chat template (plain text when it has none)."""
    messages = build_messages(problem)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    turns = [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join(turns) + "\nassistant: "
