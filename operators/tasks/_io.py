"""Shared file helpers for the task loaders: where the data lives and a strict JSONL reader."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from flowgrpo.operators.tasks.base import Problem

DATA_DIR_ENV = "FLOWGRPO_DATA_DIR"


def default_data_dir() -> Path:
    """The folder holding the benchmark copies (``gsm8k/``, ``mbpp/``).

    ``$FLOWGRPO_DATA_DIR`` when set, else ``<project>/../shared/data`` (the project being the
    folder that holds ``operators/``; right for the editable install, not for a wheel install).
    The folder is not checked for existence here.
    """
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def resolve_data_file(path: str | os.PathLike, dataset: str) -> Path:
    """Turn ``path`` into a file path, accepting a bare split name as a short form.

    A path that exists is returned as is. A bare name without a folder (``test`` or
    ``test.jsonl``) that does not exist in the working folder is looked up as
    ``<data dir>/<dataset>/<name>.jsonl``. Anything else is returned unchanged, so the caller
    reports the path the user gave.
    """
    given = Path(path)
    if given.exists() or len(given.parts) != 1:
        return given
    name = given.name if given.suffix else f"{given.name}.jsonl"
    candidate = default_data_dir() / dataset / name
    return candidate if candidate.exists() else given


def iter_jsonl(path: Path, dataset: str, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_index, record)`` for each non-blank line of a JSONL file.

    ``line_index`` is 0-based (the physical line); error messages give 1-based line numbers.

    Raises:
        FileNotFoundError: the file is missing (the message says where the shared copies are).
        ValueError: a line is not a JSON object or lacks one of ``required``.
    """
    if not path.is_file():
        raise FileNotFoundError(
            f"{dataset} file not found: {str(path)!r}. The shared copies are in "
            f"../shared/data/{dataset.lower()} beside the project (currently looked up at "
            f"{default_data_dir() / dataset.lower()}; set ${DATA_DIR_ENV} to move it). "
            "Pass the path of an existing JSONL file."
        )
    with path.open("rb") as handle:
        for index, raw in enumerate(handle):
            line = _text_line(path, index, raw)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{path}: line {index + 1} is not valid JSON ({exc.msg}, column "
                    f"{exc.colno}); each line must be one JSON object."
                ) from None
            if not isinstance(record, dict):
                raise ValueError(
                    f"{path}: line {index + 1} is a JSON {type(record).__name__}, "
                    "expected an object."
                )
            missing = [key for key in required if key not in record]
            if missing:
                raise ValueError(
                    f"{path}: line {index + 1} lacks the key(s) {missing}; a {dataset} record "
                    f"needs {list(required)} (found {sorted(record)})."
                )
            _check_text(path, index, record)
            yield index, record


#: The longest line (one problem) a problems file may hold, in bytes: a question of a million
#: characters is a broken file, and tokenizing one can take gigabytes.
MAX_LINE_BYTES = 1_000_000


def _text_line(path: Path, index: int, raw: bytes) -> str:
    """One line as text: a ValueError naming the file and line when it is too long or not
    UTF-8."""
    if len(raw) > MAX_LINE_BYTES:
        raise ValueError(
            f"{path}: line {index + 1} is {len(raw):,} bytes, over the {MAX_LINE_BYTES:,} a "
            "problem may have; shorten it or leave it out."
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: line {index + 1} is not UTF-8 text (byte {raw[exc.start]:#04x} at "
            f"position {exc.start + 1}); save the file as UTF-8."
        ) from None


def _check_text(path: Path, index: int, record: dict) -> None:
    """Every string of a record must be valid Unicode: JSON can spell a lone surrogate
    (``"\\ud800"``), which no tokenizer accepts."""
    todo = list(record.values())
    while todo:
        value = todo.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    f"{path}: line {index + 1} holds a lone surrogate (an unpaired \\ud800-"
                    "\\udfff escape), which is not text; fix or drop that line."
                ) from None
        elif isinstance(value, (list, dict)):
            todo += list(value.values()) if isinstance(value, dict) else value


def check_problems(source: str, problems: object) -> None:
    """What a loader returned (a plugin's included) must be problems whose text a tokenizer
    takes: a list of :class:`Problem`, each question a string of valid Unicode within
    :data:`MAX_LINE_BYTES`. A ValueError names the source, the problem and the fix; the file
    readers check the same per line, this catches loaders that build problems in memory."""
    if not isinstance(problems, list):
        raise ValueError(
            f"task {source!r}: its loader returned {type(problems).__name__}, not a list of "
            "Problem; return a list."
        )
    for index, problem in enumerate(problems):
        where = f"task {source!r}: problem {index}"
        if not isinstance(problem, Problem):
            raise ValueError(f"{where} is a {type(problem).__name__}, not a Problem.")
        if not isinstance(problem.question, str):
            raise ValueError(f"{where} ({problem.id!r}) has a question that is not text.")
        try:
            size = len(problem.question.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError(
                f"{where} ({problem.id!r}) holds a lone surrogate (an unpaired \\ud800-\\udfff),"
                " which is not text; fix or drop that problem."
            ) from None
        if size > MAX_LINE_BYTES:
            raise ValueError(
                f"{where} ({problem.id!r}) has a {size:,}-byte question, over the "
                f"{MAX_LINE_BYTES:,} a problem may have; shorten it or leave it out."
            )


def check_limit(limit: int | None) -> None:
    """Raise ValueError unless ``limit`` is None or a non-negative int."""
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"limit must be None or a non-negative integer, got {limit!r}")
