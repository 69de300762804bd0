"""The policy's prompt: a short instruction, the domain's operators, and three worked examples
as chat turns (few-shot), then the problem. Everything the policy is told lives here.

Short on purpose: on a CPU every prompt token is paid K times per step in generation, and a
135M model imitates examples far better than it follows a long description. Measured with the
untrained SmolLM2-135M-Instruct (4 problems x 8 samples, 32 new tokens, temperature 0.8): a long
syntax description gave 100% prose (fallback); this few-shot prompt gives about 50% fallback and
a few valid workflows, enough spread for group-relative advantages.
The operator list is generated from the run's operator table (filtered by domain), so the prompt
never disagrees with the validator; every example is checked by a test to be valid for its domain.

Your own prompt: the config's ``prompt:`` section (:class:`~dsl.fewshot.PromptSpec`: ``system``,
``examples``, ``file``). The run environment holds it with the run's operator table as a
:class:`PolicyPrompt`, which the rollout renders; nothing here is process-wide. Every function
takes the prompt and the table explicitly (None: the built-in prompt, the process-wide table). A
field left null keeps the built-in text or examples below.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flowgrpo.dsl import OperatorTable, default_table
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


@dataclass(frozen=True)
class PolicyPrompt:
    """The prompt of one run: its :class:`PromptSpec` and the operator table whose operators the
    system message lists. Built once with the run environment and passed to the rollout; the
    defaults are the built-in prompt and the process-wide table (AFlow's set plus operators
    declared from Python)."""

    spec: PromptSpec = field(default_factory=PromptSpec)
    operators: OperatorTable | None = None

    def render(self, problem: Problem, tokenizer) -> str:
        """The prompt text of ``problem`` (see :func:`render_prompt`)."""
        return render_prompt(problem, tokenizer, self.spec, self.operators)

    def messages(self, problem: Problem) -> list[dict]:
        """The chat messages of ``problem`` (see :func:`build_messages`)."""
        return build_messages(problem, self.spec, self.operators)


def system_prompt(
    domain: str, prompt: PromptSpec | None = None, operators: OperatorTable | None = None
) -> str:
    """The system message for problems of ``domain`` (math, code or qa): ``prompt``'s text (None:
    the built-in one) listing the operators of ``operators`` allowed for the domain."""
    spec = prompt if prompt is not None else PromptSpec()
    table = operators if operators is not None else default_table()
    allowed = table.for_domain(domain)
    template = spec.system if spec.system is not None else SYSTEM
    return template.format(operators=", ".join(n for n in table if n in allowed))


def examples_for(domain: str, prompt: PromptSpec | None = None) -> tuple[tuple[str, str], ...]:
    """(question, workflow) pairs shown before a problem of ``domain``."""
    spec = prompt if prompt is not None else PromptSpec()
    own = spec.for_domain(domain)
    if own is None:
        return EXAMPLES.get(domain, ())
    return tuple((e.question, e.workflow) for e in own)


def build_messages(
    problem: Problem, prompt: PromptSpec | None = None, operators: OperatorTable | None = None
) -> list[dict]:
    """System message, the domain's examples as user/assistant turns, then the problem, with
    the ``meta`` values the prompt's ``meta_keys`` name under it (one ``key: value`` line each)."""
    system = system_prompt(problem.domain, prompt, operators)
    messages = [{"role": "system", "content": system}]
    for question, workflow in examples_for(problem.domain, prompt):
        messages += [
            {"role": "user", "content": f"Problem: {question}"},
            {"role": "assistant", "content": workflow},
        ]
    spec = prompt if prompt is not None else PromptSpec()
    lines = [f"Problem: {problem.question.strip()}", *spec.meta_lines(problem.id, problem.meta)]
    messages.append({"role": "user", "content": "\n".join(lines)})
    return messages


def render_prompt(
    problem: Problem,
    tokenizer,
    prompt: PromptSpec | None = None,
    operators: OperatorTable | None = None,
) -> str:
    """The prompt text with the tokenizer's chat template (plain text when it has none)."""
    messages = build_messages(problem, prompt, operators)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    turns = [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join(turns) + "\nassistant: "
