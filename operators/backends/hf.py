"""In-process Hugging Face causal LM as the executor, with batched left-padded generation.

On the CPU default the executor *is* the policy's base model: when the model is a peft
``PeftModel`` the backend generates inside ``model.disable_adapter()``, so no second copy of the
weights is loaded.

Sampling (temperature > 0) is seeded per request (:func:`~flowgrpo.operators.llm.request_seed`
of ``seed`` and the request's context) and drawn row by row
(:mod:`flowgrpo.operators.seeded_sampling`): the same request answers the same whatever it is
batched with, and torch's global generator is not touched.

Not handled: thread safety (``generate`` changes ``tokenizer.padding_side`` and the model's
train/eval mode for the duration of a call: run one call at a time), stop strings other than EOS.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from flowgrpo.operators.llm import (
    GenerationRequest,
    GenerationResult,
    Message,
    decoding_key,
    request_seed,
)
from flowgrpo.operators.models import load_model, model_name, with_pad_token

logger = logging.getLogger(__name__)


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
        seed: base of the per-request seeds of sampled requests (unused when greedy).
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
        seed: int = 0,
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
        self.seed = int(seed)
        self.disable_adapter = bool(disable_adapter)
        config = getattr(model, "config", None)
        self.name = name or getattr(config, "name_or_path", None) or type(model).__name__
        adapter = "none"
        if _is_peft_model(model):
            adapter = "disabled" if self.disable_adapter else "active"
        self._adapter_mode = adapter
        self.settings_key = decoding_key(
            f"hf:{self.name}",
            self.max_new_tokens,
            self.temperature,
            self.seed,
            extra=f":adapter={adapter}",
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
        """Load a model with :func:`~flowgrpo.operators.models.load_model` and wrap it.

        ``kwargs`` go to ``__init__``; ``name`` defaults to the loaded model's name.
        """
        model, tokenizer = load_model(name_or_path, gguf_file=gguf_file, dtype=dtype, device=device)
        kwargs.setdefault("name", model_name(name_or_path, gguf_file))
        return cls(model, tokenizer, **kwargs)

    @property
    def repeats_differ(self) -> bool:
        """Repeated runs of one workflow (``rollout.executions``) differ only when sampling."""
        return self.temperature > 0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """One result per request, in order; failures become results with ``error`` set."""
        results: list[GenerationResult | None] = [None] * len(requests)
        groups: dict[tuple[int, float], list[tuple[int, str, int]]] = {}
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
            seed = request_seed(self.seed, request) if temperature > 0 else 0  # greedy: unused
            groups.setdefault((max_new, float(temperature)), []).append((index, prompt, seed))
        if groups:
            with self._generation_mode():
                for (max_new, temperature), items in sorted(groups.items()):
                    for batch in self._batches(items):
                        texts = [prompt for _, prompt, _ in batch]
                        seeds = [seed for _, _, seed in batch]
                        outs = self._run_batch(texts, max_new, temperature, seeds)
                        for (index, _, _), result in zip(batch, outs, strict=True):
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

    def _batches(self, items: list[tuple[int, str, int]]) -> Iterator[list[tuple[int, str, int]]]:
        ordered = sorted(items, key=lambda item: len(item[1]))
        for start in range(0, len(ordered), self.batch_size):
            yield ordered[start : start + self.batch_size]

    @contextlib.contextmanager
    def _generation_mode(self) -> Iterator[None]:
        """Eval mode, left padding, a pad token and (with peft) the adapter disabled."""
        tokenizer, model = self.tokenizer, self.model
        with_pad_token(tokenizer)  # a tokenizer passed in may have none
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
        self, prompts: list[str], max_new_tokens: int, temperature: float, seeds: list[int]
    ) -> list[GenerationResult]:
        """One ``model.generate`` call; an exception (e.g. out of memory) fails the whole batch."""
        started = time.perf_counter()
        try:
            outputs, prompt_lens, completion_lens = self._generate_tokens(
                prompts, max_new_tokens, temperature, seeds
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
        self, prompts: list[str], max_new_tokens: int, temperature: float, seeds: list[int]
    ) -> tuple[list[str], list[int], list[int]]:
        import torch  # heavy: imported on first use so flowgrpo.operators stays light

        tokenizer = self.tokenizer
        with_template = bool(getattr(tokenizer, "chat_template", None))
        enc = tokenizer(
            prompts, return_tensors="pt", padding=True, add_special_tokens=not with_template
        )
        device = next(self.model.parameters()).device
        enc = {k: v.to(device) for k, v in enc.items()}
        sampling: dict[str, Any] = {"do_sample": False}
        if temperature > 0:  # greedy over Gumbel-max draws: exact sampling, a generator a row
            from flowgrpo.operators.seeded_sampling import seeded_sampling  # heavy (torch)

            sampling["logits_processor"] = seeded_sampling(seeds, temperature)
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
