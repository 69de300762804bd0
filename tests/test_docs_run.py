"""Documentation that runs (issue 43): every command and code block of README.md, docs/USAGE.md
and docs/EXTENDING.md runs here as written, or the doc says above it that it is not run, and why.

What counts as a block: a fenced block with a language (``bash``, ``python``, ``yaml``,
``jsonl``) and an indented console block (four spaces, then ``$ `` or a command). Fences without
a language and other indented text are pictures of output or grammar, not code. A block is:

* marked: the line before it (blank lines aside) is ``*Not run by the doc tests: REASON*``;
* shown from a file: a python or yaml block whose text is in a file under ``examples/`` (those
  files run where the docs' commands use them and in tests/recipes);
* otherwise run, in a fresh folder holding ``configs/`` and ``examples/`` (so ``runs/...`` is
  written there): bash with ``bash -e``, exit 0; a console block's command, its shown output
  lines found in what it printed; python with ``python``, exit 0; yaml loaded as a config
  (``load_config``); jsonl read as a problems file (``load_task("jsonl:...")``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/USAGE.md", "docs/EXTENDING.md")
MARK = re.compile(r"^\*Not run by the doc tests: (.+)\*$")
FENCE = re.compile(r"^```(\w+)\s*$")
COMMAND = re.compile(r"^    (\$ |flowgrpo |PYTHONPATH=|python )")
LANGUAGES = ("bash", "python", "yaml", "jsonl")
TIMEOUT_S = 240
#: What a doc asks the reader to set up first: EXTENDING's recipes live in examples/my_ext and
#: the doc says to put ``examples`` on PYTHONPATH to use them.
DOC_ENV = {"docs/EXTENDING.md": {"PYTHONPATH": "examples"}}


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # 1-based line of its first code line
    lang: str  # bash, python, yaml, jsonl or console
    text: str
    mark: str | None  # the reason it is not run, when marked

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


def _mark_before(lines: list[str], i: int) -> str | None:
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    found = MARK.match(lines[j].strip()) if j >= 0 else None
    return found.group(1) if found else None


def _fenced(lines: list[str], i: int) -> tuple[int, list[str]]:
    j = i + 1
    while not lines[j].startswith("```"):
        j += 1
    return j, lines[i + 1 : j]


def blocks_of(doc: str) -> list[Block]:
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            end, body = _fenced(lines, i)
            lang = FENCE.match(lines[i])
            if lang and lang.group(1) in LANGUAGES:
                text = "\n".join(body) + "\n"
                out.append(Block(doc, i + 2, lang.group(1), text, _mark_before(lines, i)))
            i = end + 1
        elif COMMAND.match(lines[i]) and (i == 0 or not lines[i - 1].startswith("    ")):
            j = i
            while j < len(lines) and lines[j].startswith("    "):
                j += 1
            text = "\n".join(x[4:] for x in lines[i:j]) + "\n"
            out.append(Block(doc, i + 1, "console", text, _mark_before(lines, i)))
            i = j
        else:
            i += 1
    return out


BLOCKS = [block for doc in DOCS for block in blocks_of(doc)]
EXAMPLE_TEXTS = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "examples").rglob("*"))
                 if p.is_file() and p.suffix in (".py", ".yaml", ".jsonl", ".txt")]  # fmt: skip


def shown_from_a_file(block: Block) -> bool:
    return block.lang in ("python", "yaml") and any(block.text in t for t in EXAMPLE_TEXTS)


#: The blocks this file runs: neither marked nor shown from a file.
RUN = [b for b in BLOCKS if b.mark is None and not shown_from_a_file(b)]


def test_the_docs_have_blocks_and_every_mark_has_a_reason():
    assert {b.doc for b in BLOCKS} == set(DOCS)
    assert all(b.mark is None or len(b.mark.strip()) > 10 for b in BLOCKS)
    assert len(RUN) >= 10, "most documented blocks run"


@pytest.fixture
def workdir(tmp_path):
    for name in ("configs", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def _env(doc: str) -> dict:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", **DOC_ENV.get(doc, {})}  # fmt: skip


def _shell(command: str, block: Block, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-c", command], cwd=cwd, env=_env(block.doc), text=True,
                          capture_output=True, timeout=TIMEOUT_S)  # fmt: skip


def _console(block: Block, cwd: Path) -> None:
    """``$ command`` (continuation lines joined), then the output the doc shows."""
    lines = block.text.splitlines()
    n = 1
    while lines[n - 1].rstrip().endswith("\\"):
        n += 1
    command = "\n".join(lines[:n]).removeprefix("$ ")
    done = _shell(command, block, cwd)
    shown = [" ".join(x.split()) for x in lines[n:] if x.strip()]
    printed = " ".join((done.stdout + done.stderr).split())
    if not shown:
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for line in shown:
        assert line in printed, (
            f"{block.name}: the doc shows {line!r}; it printed:\n{printed[-3000:]}"
        )


def _load(block: Block, cwd: Path) -> None:
    from flowgrpo.operators.tasks import load_task
    from flowgrpo.trainer.config import load_config

    path = cwd / f"block.{block.lang}"
    path.write_text(block.text, encoding="utf-8")
    if block.lang == "yaml":
        load_config(path)
    else:
        assert load_task(f"jsonl:{path}"), block.name


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=lambda b: b.name)
def test_the_block_runs_as_written(block, workdir):
    if block.lang == "console":
        return _console(block, workdir)
    if block.lang in ("yaml", "jsonl"):
        return _load(block, workdir)
    command = block.text if block.lang == "bash" else f"python - <<'PYTHON'\n{block.text}PYTHON\n"
    done = _shell(command, block, workdir)
    assert done.returncode == 0, f"{block.name}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
