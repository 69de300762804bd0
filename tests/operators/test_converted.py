"""The converted copy of a GGUF model (operators/converted.py): a later load reads it instead of
converting the file again, and gets the same model and tokenizer."""

from __future__ import annotations

import logging

import pytest
import torch

from flowgrpo.operators import converted
from flowgrpo.operators.models import default_model_path, load_model


@pytest.mark.slow
def test_the_second_load_of_the_embedded_model_reads_the_copy_and_gives_the_same_model(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("FLOWGRPO_CACHE", str(tmp_path))
    first, tok1 = load_model("default")
    folder = converted.converted_folder(*default_model_path(), "float32")
    assert folder is not None and folder.parent == tmp_path / "converted"
    assert (folder / "model.safetensors").is_file()
    with caplog.at_level(logging.INFO, logger="flowgrpo.operators.models"):
        second, tok2 = load_model("default")
    assert f"converted copy {folder}" in caplog.text
    a, b = first.state_dict(), second.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert second.name_or_path == first.name_or_path == default_model_path()[0]
    chat = [{"role": "user", "content": "Tom has 3 apples and buys 4. How many?"}]
    text = tok1.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert text == tok2.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    workflow = "[Programmer, Custom] -> ScEnsemble -> (Review ? Revise : done) * 2"
    for string in (text, workflow):
        assert tok1(string)["input_ids"] == tok2(string)["input_ids"]
    assert (tok1.eos_token_id, tok1.pad_token) == (tok2.eos_token_id, tok2.pad_token)


@pytest.mark.parametrize("value", ["off", "0", "none", ""])
def test_off_keeps_no_copy(monkeypatch, tmp_path, value):
    monkeypatch.setenv("FLOWGRPO_CACHE", value)
    assert converted.cache_root() is None
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert converted.converted_folder(str(tmp_path), "m.gguf", "float32") is None


def test_the_default_place_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv("FLOWGRPO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert converted.cache_root() == tmp_path / "flowgrpo"


def test_a_changed_file_or_dtype_gets_a_folder_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setenv("FLOWGRPO_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF-1")
    one = converted.converted_folder(str(tmp_path), "m.gguf", "float32")
    assert one == converted.converted_folder(str(tmp_path), "m.gguf", "float32")
    assert one != converted.converted_folder(str(tmp_path), "m.gguf", "bfloat16")
    gguf.write_bytes(b"GGUF-22")  # another size
    assert one != converted.converted_folder(str(tmp_path), "m.gguf", "float32")
    assert converted.converted_folder("Org/model", "m.gguf", "float32") is None, "a hub id"


def test_a_copy_that_does_not_load_is_reported_and_skipped(tmp_path, caplog):
    folder = tmp_path / "copy"
    assert converted.load_converted(folder, torch.float32, "src") is None, "no copy yet"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    (folder / converted._DONE).write_text("{}")
    with caplog.at_level(logging.WARNING):
        assert converted.load_converted(folder, torch.float32, "src") is None
    assert "does not load" in caplog.text and "converting the GGUF file again" in caplog.text


class _Saves:
    """A stand-in for a model or tokenizer: ``save_pretrained`` writes one named file."""

    def __init__(self, name: str):
        self.name = name

    def save_pretrained(self, path: str) -> None:
        with open(f"{path}/{self.name}", "w", encoding="utf-8") as out:
            out.write(self.name)


def test_a_copy_written_first_by_another_process_is_kept_and_nothing_is_left_over(tmp_path, caplog):
    folder = tmp_path / "converted" / "m-float32-x"
    with caplog.at_level(logging.INFO, logger="flowgrpo.operators.converted"):
        assert converted.save_converted(_Saves("mine"), _Saves("tok"), folder, "src") is True
    assert f"kept the converted model in {folder}" in caplog.text, "the user is told where"
    assert sorted(p.name for p in folder.iterdir()) == [converted._DONE, "mine", "tok"]
    # a second writer: its rename fails, the first copy stays, its temporary folder is removed
    assert converted.save_converted(_Saves("theirs"), _Saves("tok"), folder, "src") is True
    assert not (folder / "theirs").exists()
    assert [p.name for p in folder.parent.iterdir()] == ["m-float32-x"]


def test_a_cache_that_cannot_be_written_is_reported_and_the_load_goes_on(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.WARNING):
        ok = converted.save_converted(_Saves("m"), _Saves("t"), blocker / "m-float32-x", "src")
    assert ok is False and "could not keep the converted model" in caplog.text
    assert blocker.read_text() == "not a folder"
