"""Every executor prompt, in one place. Short on purpose: small executors follow short prompts.

Each function returns the user message text; the backend applies the model's chat template.
"""

from __future__ import annotations

SYSTEM = "You are a careful problem solver. Follow the instruction exactly."


def _problem(question: str) -> str:
    return f"Problem:\n{question.strip()}"


def _solution(solution: str | None) -> str:
    return f"\n\nCurrent solution:\n{solution.strip()}" if solution else ""


def custom(question: str, instruction: str | None, solution: str | None) -> str:
    task = instruction or "Solve the problem. End with the final answer."
    return f"{task}\n\n{_problem(question)}{_solution(solution)}"


def answer_generate(question: str, instruction: str | None) -> str:
    task = instruction or "Think step by step."
    return (
        f"{task} Then write the final answer on the last line as 'Answer: <answer>'.\n\n"
        f"{_problem(question)}"
    )


def programmer(question: str, instruction: str | None, error: str | None, code: str | None) -> str:
    task = instruction or "Write Python code that computes the answer."
    retry = ""
    if error:
        retry = f"\n\nYour previous code:\n```python\n{code}\n```\nfailed with:\n{error}\nFix it."
    return (
        f"{task} Define a function solve() that returns the final answer. Use only the "
        f"standard library. Reply with one ```python code block.\n\n{_problem(question)}"
        f"{retry}"
    )


def code_generate(question: str, instruction: str | None, entry_point: str | None) -> str:
    name = f" named {entry_point}" if entry_point else ""
    task = instruction or "Write the Python function that solves the problem."
    return (
        f"{task} The function must be{name} and complete. Reply with one ```python code "
        f"block.\n\n{_problem(question)}"
    )


def review(question: str, solution: str | None, instruction: str | None) -> str:
    task = instruction or "Check the solution for mistakes."
    return (
        f"{task} Reply with PASS if it is correct, or FAIL followed by what is wrong.\n\n"
        f"{_problem(question)}{_solution(solution)}"
    )


def revise(question: str, solution: str | None, feedback: str | None, instruction: str | None):
    task = instruction or "Rewrite the solution, fixing the problems in the feedback."
    fb = f"\n\nFeedback:\n{feedback.strip()}" if feedback else ""
    return f"{task} End with the final answer.\n\n{_problem(question)}{_solution(solution)}{fb}"


def fix_code(question: str, code: str | None, failures: str) -> str:
    return (
        f"The code fails its tests:\n{failures}\n\nFix it. Reply with one ```python code "
        f"block.\n\n{_problem(question)}\n\nCode:\n```python\n{code or ''}\n```"
    )


def format_answer(question: str, solution: str | None, instruction: str | None, domain: str):
    if instruction:
        task = instruction
    elif domain == "math":
        task = "Give only the final number, nothing else."
    else:
        task = "Give only the final answer, as short as possible."
    return f"{task}\n\n{_problem(question)}{_solution(solution)}"


def choose(question: str, candidates: list[str]) -> str:
    listed = "\n\n".join(f"({chr(65 + i)}) {c.strip()}" for i, c in enumerate(candidates))
    return (
        f"Several solutions to the problem follow. Which answer do most of them agree on and "
        f"is correct? Reply with the letter only.\n\n{_problem(question)}\n\n{listed}"
    )
