"""The policy's prompt: a short instruction, the domain's operators, and three worked examples
as chat turns (few-shot), then the problem. Everything the policy is told lives here.

Short on purpose: on a CPU every prompt token is paid K times per step in generation, and a
135M model imitates examples far better than it follows a long description. Measured with the
untrained SmolLM2-135M-Instruct (4 problems x 8 samples, 32 new tokens, temperature 0.8): a long
syntax description gave 100% prose (fallback); this few-shot prompt gives about 50% fallback and
a few valid workflows, enough spread for group-relative advantages.
The operator list is generated from ``dsl.OPERATORS`` (filtered by domain), so the prompt never
disagrees with the validator; every example is checked by a test to be valid for its domain.

Your own prompt: the config's ``prompt:`` section (:class:`~dsl.fewshot.PromptSpec`: ``system``,
``examples``, ``file``), validated at load. The Trainer makes it the process's *active* prompt
(:func:`use_prompt`); every function here takes an explicit ``prompt`` too, and uses the active
one when given None. A field left null keeps the built-in text or examples below.
"""

from __future__ import annotations

from flowgrpo.dsl import OPERATORS, operators_for_domain
from flowgrpo.dsl.fewshot import PromptSpec
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


_ACTIVE: list[PromptSpec] = [PromptSpec()]  # the built-in prompt until use_prompt()


def use_prompt(prompt: PromptSpec | None) -> None:
    """Make ``prompt`` the active policy prompt of this process (None: the built-in one)."""
    _ACTIVE[0] = prompt if prompt is not None else PromptSpec()


def active_prompt() -> PromptSpec:
    """The policy prompt :func:`render_prompt` uses when given none."""
    return _ACTIVE[0]


def system_prompt(domain: str, prompt: PromptSpec | None = None) -> str:
    """The system message for problems of ``domain`` (math, code or qa)."""
    spec = prompt if prompt is not None else active_prompt()
    allowed = operators_for_domain(domain)
    template = spec.system if spec.system is not None else SYSTEM
    return template.format(operators=", ".join(n for n in OPERATORS if n in allowed))


def examples_for(domain: str, prompt: PromptSpec | None = None) -> tuple[tuple[str, str], ...]:
    """(question, workflow) pairs shown before a problem of ``domain``."""
    spec = prompt if prompt is not None else active_prompt()
    own = spec.for_domain(domain)
    if own is None:
        return EXAMPLES.get(domain, ())
    return tuple((e.question, e.workflow) for e in own)


def build_messages(problem: Problem, prompt: PromptSpec | None = None) -> list[dict]:
    """System message, the domain's examples as user/assistant turns, then the problem."""
    messages = [{"role": "system", "content": system_prompt(problem.domain, prompt)}]
    for question, workflow in examples_for(problem.domain, prompt):
        messages += [
            {"role": "user", "content": f"Problem: {question}"},
            {"role": "assistant", "content": workflow},
        ]
    messages.append({"role": "user", "content": f"Problem: {problem.question.strip()}"})
    return messages


def render_prompt(problem: Problem, tokenizer, prompt: PromptSpec | None = None) -> str:
    """The prompt text with the tokenizer's chat template (plain text when it has none)."""
    messages = build_messages(problem, prompt)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    turns = [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join(turns) + "\nassistant: "
