"""A start that already writes a table from label to workflow (issue 40).

Where a task labels its problems (``meta``: template, difficulty), ``flowgrpo search --by KEY``
finds each label's best workflow (sequential halving per label, the budget split evenly);
``--sft-pairs`` writes each problem with its label's first pick, and ``flowgrpo sft`` trains a
start on those pairs with the labels shown in the prompt (``prompt.meta_keys``). RL then trains
from that start. Built through the ``flowgrpo`` CLI, the interface a user runs, and cached in
a folder named by everything that shapes it (a changed budget or world is a new start).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LabelStart:
    """How the start is made.

    Attributes:
        keys: the problems' ``meta`` keys searched by and shown to the policy, e.g.
            ``("template", "difficulty")``.
        budget: executor calls for the whole search (split evenly over the labels).
        sft_steps: SFT optimizer steps, all of them run (no validity stop, one held-out check at
            the end).
        candidates: the workflows searched (None: the search's default, the canonical space);
            the smoke run passes a few short ones.
    """

    keys: tuple[str, ...]
    budget: int
    sft_steps: int
    candidates: tuple[str, ...] | None = None

    def overrides(self) -> list[str]:
        """The ``--set`` that shows the labels to the policy."""
        return [f"prompt.meta_keys={json.dumps(list(self.keys))}"]


def start_folder(root: Path, recipe: LabelStart, config: str, sets: list[str]) -> Path:
    """``ROOT/label-start-<hash>``: the hash of the recipe, the config path and every ``--set``."""
    key = json.dumps([list(recipe.keys), recipe.budget, recipe.sft_steps, recipe.candidates,
                      config, sets])  # fmt: skip
    return root / f"label-start-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def search_files(
    folder: Path, recipe: LabelStart, config: str, sets: list[str]
) -> tuple[Path, Path]:
    """(search.json, pairs.jsonl) of the start in ``folder``: its own where a start built before
    searches were shared holds them, else those of ``ROOT/label-search-<hash>`` beside it.

    The search's hash leaves out the ``prompt.*`` overrides: ``flowgrpo search`` renders no
    prompt (the pairs hold the problem, its workflow and its labels, ``recipe.keys``), so starts
    that differ only in their prompt (its examples, its system text) share one search.
    """
    if (folder / "search.json").exists():  # the search writes both files in one command
        return folder / "search.json", folder / "pairs.jsonl"
    read = [s for s in sets if not s.startswith("prompt.")]
    key = json.dumps([list(recipe.keys), recipe.budget, recipe.candidates, config, read])
    shared = folder.parent / f"label-search-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    return shared / "search.json", shared / "pairs.jsonl"


STAMP = "config.sha256"
# The SFT rate of every label start recorded (the library's default). The known-optimum
# config's format start runs at 1e-3 (60 steps from a prompt without labels); the label start's
# 120 steps on each label's first pick were measured at this rate and keep it.
SFT_LR = 5e-4


def check_config_stamp(folder: Path, config: str) -> None:
    """The folders are named by the config's *path* and the ``--set``s; the file's content is
    stamped in ``FOLDER/config.sha256`` (written on first use, also into a folder built before
    stamps: its parts are trusted as they are), and a folder stamped with another content of
    the config is refused, not reused: its search and start were made by other settings."""
    digest = hashlib.sha256(Path(config).read_bytes()).hexdigest()
    stamp = folder / STAMP
    if not stamp.exists():
        stamp.write_text(digest + "\n", encoding="utf-8")
        return
    if stamp.read_text(encoding="utf-8").strip() != digest:
        sys.exit(f"error: {folder} was built from another version of {config} (its sha256 is in "
                 f"{stamp}); restore that config, or delete {folder} to build it again with "
                 "this one")  # fmt: skip


def _flowgrpo(args: list[str], what: str) -> None:
    exe = shutil.which("flowgrpo")
    cmd = [exe] if exe else [sys.executable, "-m", "flowgrpo.trainer.cli"]
    print(f"[label start] {what}: flowgrpo {' '.join(args)}", flush=True)
    if subprocess.run([*cmd, *args], check=False).returncode != 0:
        sys.exit(f"error: the label start's {what} failed (its message is above); fix it and run "
                 "the same command again: finished parts are kept")  # fmt: skip


def build_label_start(recipe: LabelStart, config: str, sets: list[str], folder: Path) -> Path:
    """Search per label (:func:`search_files`: shared by starts that differ only in their
    prompt), then SFT on each label's first pick; returns the adapter folder ``FOLDER/start``.
    ``sets`` are the ``--set`` overrides of the runs (world, study) without the start's own."""
    search, pairs = search_files(folder, recipe, config, sets)
    adapter = folder / "start"
    folder.mkdir(parents=True, exist_ok=True)
    search.parent.mkdir(parents=True, exist_ok=True)
    for part in dict.fromkeys((search.parent, folder)):  # the search's folder may be the start's
        check_config_stamp(part, config)
    common = ["--config", config]
    for value in [*sets, *recipe.overrides()]:
        common += ["--set", value]
    if not (search.exists() and pairs.exists()):
        by = [arg for key in recipe.keys for arg in ("--by", key)]
        if recipe.candidates is not None:
            listed = folder / "candidates.txt"
            listed.write_text("\n".join(recipe.candidates) + "\n", encoding="utf-8")
            by += ["--candidates", str(listed)]
        _flowgrpo(["search", *common, "--budget", str(recipe.budget), *by, "--top", "3",
                   "--out", str(search), "--sft-pairs", str(pairs), "-q"], "search")  # fmt: skip
    if not (adapter / "adapter_config.json").exists():
        if adapter.exists():  # an SFT stopped part-way; its folder is this module's own
            shutil.rmtree(adapter)
        steps = recipe.sft_steps
        sft = [f"sft.data=jsonl:{pairs}", f"sft.max_steps={steps}", f"sft.eval_every={steps}",
               f"sft.eval_from={steps}", "sft.target_validity=null",
               f"sft.lr={SFT_LR!r}"]  # fmt: skip
        _flowgrpo(["sft", *common, *(a for s in sft for a in ("--set", s)), "--out", str(adapter)],
                  "SFT")  # fmt: skip
    return adapter
