"""Exceptions of the DSL package."""

from __future__ import annotations


class DSLError(ValueError):
    """Base class of every error the DSL package raises on bad input."""


class DSLSyntaxError(DSLError):
    """A workflow text that does not follow the grammar.

    Attributes:
        message: what is wrong, with the position (``"expected an operator after '->' at 1:18"``).
        line: 1-based line of the problem.
        column: 1-based column of the problem.
        hint: what to do about it (may be empty).
        text: the text that failed to parse.
        reason: the message without the position (for displays that show it separately).
    """

    def __init__(
        self,
        message: str,
        line: int,
        column: int,
        hint: str = "",
        text: str = "",
        reason: str | None = None,
    ):
        self.message = message
        self.reason = reason if reason is not None else message
        self.line = line
        self.column = column
        self.hint = hint
        self.text = text
        super().__init__(f"{message}; {hint}" if hint else message)

    def __reduce__(self):  # keep it picklable across processes
        return (
            type(self),
            (self.message, self.line, self.column, self.hint, self.text, self.reason),
        )
