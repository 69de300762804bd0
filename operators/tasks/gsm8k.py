"""GSM8K grade-school math problems from JSONL (``question``, ``answer`` ending in ``#### N``).

The project never downloads data: the copies live in ``../shared/data/gsm8k`` beside the
project (``train.jsonl``, ``test.jsonl``).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from flowgrpo.operators.tasks._io import check_limit, iter_jsonl, resolve_data_file
from flowgrpo.operators.tasks.base import Problem

log = logging.getLogger(__name__)

_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)$")


def parse_final_answer(solution: str) -> str | None:
    """The number after the last ``####`` of a GSM8K solution, commas and ``$`` removed.

    Returns None when there is no ``####`` or what follows it is not a plain number.
    """
    _, sep, tail = solution.rpartition("####")
    if not sep:
        return None
    value = tail.strip().replace(",", "").replace("$", "").strip()
    return value if _NUMBER.match(value) else None


def load_gsm8k(path: str | os.PathLike, limit: int | None = None) -> list[Problem]:
    """Load GSM8K problems from a JSONL file.

    Args:
        path: the JSONL file; a bare split name (``test``) is looked up in the shared data folder.
        limit: keep at most this many problems (the first ones in file order); None for all.

    Returns:
        Problems with domain ``math``, id ``gsm8k/<file stem>/<line index>`` (0-based physical
        line), answer the final number as text (``"70000"``), meta ``solution`` (the worked
        solution) and ``line`` (1-based).

    Raises:
        FileNotFoundError: the file is missing. ValueError: a bad JSON line, a missing key or an
        answer without ``#### <number>`` (the message gives the line number).
    """
    check_limit(limit)
    file = resolve_data_file(path, "gsm8k")
    problems: list[Problem] = []
    if limit == 0:
        return problems
    for index, record in iter_jsonl(Path(file), "GSM8K", ("question", "answer")):
        answer = parse_final_answer(str(record["answer"]))
        if answer is None:
            raise ValueError(
                f"{file}: line {index + 1}: the answer does not end in '#### <number>' "
                f"(it ends in {str(record['answer'])[-40:]!r})."
            )
        problems.append(
            Problem(
                id=f"gsm8k/{Path(file).stem}/{index}",
                domain="math",
                question=str(record["question"]).strip(),
                answer=answer,
                meta={"solution": record["answer"], "line": index + 1, "source": str(file)},
            )
        )
        if limit is not None and len(problems) >= limit:
            break
    log.debug("loaded %d GSM8K problems from %s", len(problems), file)
    return problems
