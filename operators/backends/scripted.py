"""A scripted executor for tests only: answers come from a table or a function, not a model.

It records every request (``.calls``) and counts ``generate`` calls (``.batches``), so tests can
assert what was asked and how it was batched, and it can simulate server failures (``fail_on``).

Not for training or evaluation: outputs do not depend on any model. Token counts are
whitespace word counts, not real tokens. Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from flowgrpo.operators.llm import GenerationRequest, GenerationResult

AnswerSource = Mapping[str, str] | Callable[[GenerationRequest], str]


class ScriptedBackend:
    """Answers requests from ``answers`` (tests only).

    Args:
        answers: a mapping looked up with the content of the request's last user message (exact
            key first, then the first key, in mapping order, that occurs inside the content), or
            a function from the request to the answer text.
        default: the answer when the mapping has no match; without it a miss is an error result.
        fail_on: requests for which it returns True get an error result (a simulated server
            failure) instead of an answer.
        name: part of ``settings_key`` (distinguish two scripted executors in one test).
    """

    def __init__(
        self,
        answers: AnswerSource,
        default: str | None = None,
        fail_on: Callable[[GenerationRequest], bool] | None = None,
        name: str = "scripted",
    ) -> None:
        if not callable(answers) and not isinstance(answers, Mapping):
            raise TypeError(
                f"answers must be a mapping or a function of the request, got {type(answers)}"
            )
        self.answers = answers
        self.default = default
        self.fail_on = fail_on
        self.settings_key = f"scripted:{name}"
        self.calls: list[GenerationRequest] = []
        self.batches = 0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """One result per request, in order; records the requests and counts the call."""
        self.batches += 1
        self.calls.extend(requests)
        return [self._answer(request) for request in requests]

    def _answer(self, request: GenerationRequest) -> GenerationResult:
        prompt_tokens = sum(len(m.content.split()) for m in request.messages)
        if self.fail_on is not None and self.fail_on(request):
            return GenerationResult(
                "", prompt_tokens=prompt_tokens, error="simulated server failure (fail_on)"
            )
        try:
            text = self._lookup(request)
        except Exception as exc:  # a failing answer function is an error result, not a raise
            return GenerationResult("", error=f"scripted answer failed: {exc!r}")
        if text is None:
            return GenerationResult(
                "", prompt_tokens=prompt_tokens, error="no scripted answer for this request"
            )
        return GenerationResult(
            text, prompt_tokens=prompt_tokens, completion_tokens=len(text.split())
        )

    def _lookup(self, request: GenerationRequest) -> str | None:
        if not isinstance(self.answers, Mapping):
            return self.answers(request)
        users = [m.content for m in request.messages if m.role == "user"]
        content = users[-1] if users else ""
        if content in self.answers:
            return self.answers[content]
        for key, answer in self.answers.items():
            if key and key in content:
                return answer
        return self.default
