"""Your own problem sets: ``jsonl:PATH`` and (optionally, with ``datasets``) ``hf:PATH``.

Both read records of the schema in :mod:`operators.tasks.records`. Options follow the path
after ``?``, joined by ``&``:

    jsonl:data/my_problems.jsonl
    jsonl:data/trivia.jsonl?domain=qa             records without 'domain' are qa
    hf:data/my_dataset                            a datasets.save_to_disk() folder
    hf:data/train.parquet?question=problem&answer=solution   a local json/jsonl/csv/parquet file,
                                                  with its columns mapped onto the schema's keys

Options: ``domain`` (math|code|qa: the default for records without one), ``split`` (hf: which
split of a DatasetDict; default the ``split`` flowgrpo asks for, train or test, when the dataset
has it, else its only split), and for hf a mapping ``KEY=COLUMN`` for any schema key (``question``,
``answer``, ``tests``, ``entry_point``, ``public_tests``, ``id``, ``domain``).

Nothing is downloaded: ``hf:`` reads local files only (``datasets`` is an optional extra:
``pip install 'flowgrpo[datasets]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flowgrpo.operators.tasks._io import check_limit, iter_jsonl
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.operators.tasks.records import KEYS, RECORD_DOMAINS, problem_from_record

__all__ = ["load_hf", "load_jsonl", "parse_options"]

_HF_FILE_TYPES = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
DATASETS_MISSING = (
    "the hf: task needs the Hugging Face 'datasets' package, which is not installed; install "
    "the optional extra: pip install 'flowgrpo[datasets]' (or: pip install datasets), or "
    "convert the data to JSONL and use jsonl:PATH"
)
DATASETS_BROKEN = (
    "the hf: task could not use the installed 'datasets' package ({why}); install a "
    "compatible one with the optional extra: pip install -U 'flowgrpo[datasets]', or convert "
    "the data to JSONL and use jsonl:PATH"
)
DATASETS_MIN = (2, 14)  # the extra's lower bound: load_from_disk/load_dataset as used here


def parse_options(arg: str | None, task: str, allowed: tuple[str, ...]) -> tuple[str, dict]:
    """``"PATH?k=v&k2=v2"`` -> ``(PATH, {k: v, k2: v2})``; unknown keys and a missing path
    raise ``ValueError`` naming the task."""
    if not arg or not arg.split("?", 1)[0].strip():
        raise ValueError(f"task {task!r} needs a path: use '{task}:PATH', e.g. '{task}:data.jsonl'")
    path, _, query = arg.partition("?")
    options: dict[str, str] = {}
    for part in filter(None, query.split("&")):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise ValueError(f"{task}:{arg}: option {part!r} is not KEY=VALUE")
        if key not in allowed:
            raise ValueError(f"{task}:{arg}: unknown option {key!r}; options: {', '.join(allowed)}")
        options[key] = value.strip()
    domain = options.get("domain", "math")
    if domain not in RECORD_DOMAINS:
        raise ValueError(f"{task}:{arg}: domain={domain}; use one of {', '.join(RECORD_DOMAINS)}")
    return path.strip(), options


def _unique(problems: list[Problem], where: str) -> None:
    seen: dict[str, str] = {}
    for p in problems:
        if p.id in seen:
            raise ValueError(
                f"{p.meta['location']}: id {p.id!r} is already used at {seen[p.id]}; ids must be "
                f"unique in {where}"
            )
        seen[p.id] = p.meta["location"]


def load_jsonl(path: str | Path, limit: int | None = None, domain: str = "math") -> list[Problem]:
    """Problems from a JSONL file of the :mod:`~operators.tasks.records` schema.

    ``domain`` is the default of records without one; ``limit`` keeps the first ones. Ids are
    ``<file stem>/<id or line index>``. Errors name the file and the line (1-based).
    """
    check_limit(limit)
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"problem file not found: {str(file)!r}; pass a JSONL file path")
    problems: list[Problem] = []
    for index, record in iter_jsonl(file, "problem", ()):
        if limit is not None and len(problems) >= limit:
            break
        where = f"{file}: line {index + 1}"
        problems.append(problem_from_record(record, where, index, f"{file.stem}/", domain))
    if not problems and limit != 0:
        raise ValueError(f"{file}: no problems in the file (one JSON object per line)")
    _unique(problems, str(file))
    return problems


def _datasets() -> Any:
    try:
        import datasets  # optional: the flowgrpo[datasets] extra; jsonl: needs nothing
    except ImportError:
        raise ValueError(DATASETS_MISSING) from None
    except Exception as exc:  # a broken install (e.g. a pyarrow it cannot load)
        raise ValueError(DATASETS_BROKEN.format(why=f"{type(exc).__name__}: {exc}")) from None
    version = str(getattr(datasets, "__version__", "0"))
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < DATASETS_MIN:
        raise ValueError(DATASETS_BROKEN.format(why=f"version {version} is older than 2.14"))
    return datasets


def _open_dataset(path: Path, split: str | None, wanted: str) -> Any:
    datasets = _datasets()
    if path.is_dir():
        data = datasets.load_from_disk(str(path))
    elif path.suffix.lower() in _HF_FILE_TYPES:
        builder = _HF_FILE_TYPES[path.suffix.lower()]
        data = datasets.load_dataset(builder, data_files=str(path))
    else:
        raise ValueError(
            f"hf:{path}: not a datasets folder (save_to_disk) nor a {'/'.join(_HF_FILE_TYPES)} file"
        )
    if not hasattr(data, "keys"):  # a single Dataset
        return data
    names = list(data.keys())
    choice = split or (wanted if wanted in names else names[0] if len(names) == 1 else None)
    if choice not in names:
        raise ValueError(f"hf:{path}: choose a split with ?split=NAME; it has {', '.join(names)}")
    return data[choice]


def load_hf(
    path: str | Path, limit: int | None = None, options: dict | None = None, split: str = "train"
) -> list[Problem]:
    """Problems from a local Hugging Face dataset (see the module docstring for the options)."""
    check_limit(limit)
    options = dict(options or {})
    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(f"hf: {str(file)!r} does not exist; pass a local folder or file")
    dataset = _open_dataset(file, options.pop("split", None), split)
    domain = options.pop("domain", "math")
    rename = {column: key for key, column in options.items()}  # KEY=COLUMN
    columns = set(getattr(dataset, "column_names", []) or [])
    absent = sorted(c for c in rename if c not in columns)
    if absent:
        raise ValueError(f"hf:{path}: no column(s) {absent}; columns: {sorted(columns)}")
    problems: list[Problem] = []
    for index, row in enumerate(dataset):
        if limit is not None and len(problems) >= limit:
            break
        record = {rename.get(k, k): v for k, v in row.items()}
        where = f"{file}: row {index}"
        problems.append(problem_from_record(record, where, index, f"{file.stem}/", domain))
    _unique(problems, str(file))
    return problems


HF_OPTIONS = ("domain", "split", *[k for k in KEYS if k != "meta"])
JSONL_OPTIONS = ("domain",)
