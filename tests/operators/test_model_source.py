"""check_model_source: a local model path that is not there is named before anything loads."""

from __future__ import annotations

import pytest
from gguf_files import write_tiny_gguf

from flowgrpo.operators.models import check_model_source


@pytest.mark.parametrize(
    "name", ["tiny-random", "default", "random:llama-tiny", "HuggingFaceTB/SmolLM2-135M", "gpt2"]
)
def test_names_that_are_not_local_paths_pass(name):
    check_model_source(name)


@pytest.mark.parametrize("name", ["/no/such/model", "./nomodel", "~/nomodel", "a/b/c", "", "  "])
def test_a_missing_local_folder_is_named(name):
    with pytest.raises(ValueError, match="is not a folder on this machine"):
        check_model_source(name)


def test_a_folder_that_exists_passes_and_its_missing_gguf_file_is_named(tmp_path):
    check_model_source(str(tmp_path))
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    check_model_source(str(tmp_path), "m.gguf")
    with pytest.raises(ValueError, match=r"gguf_file 'x\.gguf' is not in"):
        check_model_source(str(tmp_path), "x.gguf")


@pytest.mark.parametrize("bars", [True, False])
def test_the_gguf_conversion_bar_follows_transformers_progress_switch(
    capfd, monkeypatch, tmp_path, bars
):
    """transformers draws its GGUF conversion bar with tqdm directly; with its switch off
    (``--quiet``, a log file) a GGUF model loads without it, and with it on the bar shows (so
    the check can fail). The converted copy is off: the file is converted each time. A tiny
    GGUF file (tests/operators/gguf_files.py) takes the path the embedded model takes."""
    monkeypatch.setenv("FLOWGRPO_CACHE", "off")
    from transformers.utils import logging as hf_logging

    from flowgrpo.operators.models import load_model

    folder, name = write_tiny_gguf(tmp_path / "tiny")
    was = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()
    try:
        capfd.readouterr()
        model, _ = load_model(folder, gguf_file=name)
        shown = "de-quantizing GGUF tensors" in capfd.readouterr().err
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()
    assert model.config.num_hidden_layers == 1  # the tiny file, converted
    assert shown == bars
