"""Replacing a file whole: a failure (a kill) part-way leaves the old content, never an empty
file (``flowgrpo.files``; what a resumed run's metrics.jsonl and config.yaml rely on); removing
what a command wrote never follows a link."""

from __future__ import annotations

import json
import os

import pytest

from flowgrpo.files import replace_text
from flowgrpo.trainer.monitoring.metrics import truncate_jsonl


def test_the_new_text_replaces_the_old_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("old\n")
    replace_text(path, "new\n")
    assert path.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


def test_a_write_that_dies_half_way_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    rows = "".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3, 4))
    path.write_text(rows)

    def killed(fd):  # stands in for SIGKILL between writing and renaming
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        truncate_jsonl(path, 3)  # a resume cutting back to its checkpoint (once emptied first)
    assert path.read_text() == rows
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]
    monkeypatch.undo()
    truncate_jsonl(path, 3)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]


def test_remove_takes_a_folder_a_file_and_a_link_but_never_what_a_link_points_to(tmp_path):
    from flowgrpo.files import remove

    theirs = tmp_path / "theirs"
    (theirs / "inner").mkdir(parents=True)
    (theirs / "inner" / "keep.txt").write_text("the user's")
    run = tmp_path / "run"
    (run / "plots").mkdir(parents=True)
    (run / "plots" / "a.png").write_bytes(b"png")
    (run / "metrics.jsonl").write_text("{}\n")
    (run / "linked").symlink_to(theirs, target_is_directory=True)
    (run / "dangling").symlink_to(tmp_path / "gone")
    for name in ("plots", "metrics.jsonl", "linked", "dangling"):
        assert remove(run / name) is True
    assert list(run.iterdir()) == []
    assert (theirs / "inner" / "keep.txt").read_text() == "the user's"
    assert remove(run / "absent") is False


# ------------------------------------------- a plot's mark: a user's PNG is never taken for one


def test_a_png_with_flowgrpos_text_chunk_is_marked(tmp_path, write_png):
    from flowgrpo.files import png_marked

    assert png_marked(write_png(tmp_path / "a.png", b"flowgrpo\0plot"))
    assert png_marked(write_png(tmp_path / "b.png", b"flowgrpo\0"))


@pytest.mark.parametrize(
    "text", [None, b"Software\0flowgrpo", b"flowgrpo-like\0plot", b"Comment\0flowgrpo\0plot"]
)
def test_a_png_without_the_keyword_is_not_marked(tmp_path, write_png, text):
    from flowgrpo.files import png_marked

    assert not png_marked(write_png(tmp_path / "a.png", text))


def test_what_is_not_a_whole_png_file_is_not_marked(tmp_path, write_png):
    from flowgrpo.files import png_marked

    marked = write_png(tmp_path / "a.png", b"flowgrpo\0plot")
    (tmp_path / "text.png").write_text("flowgrpo\0plot")
    (tmp_path / "cut.png").write_bytes(marked.read_bytes()[:45])  # cut in the keyword
    (tmp_path / "link.png").symlink_to(marked)  # replacing it would write the target
    (tmp_path / "folder.png").mkdir()
    for name in ("text.png", "cut.png", "link.png", "folder.png", "missing.png"):
        assert not png_marked(tmp_path / name), name
