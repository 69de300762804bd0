"""The model-level parts of ``scripts/gpu_check.py``: ``exact`` (bf16 on the device: the
shared-prefix log-probs against the full forward, merged-weight sampling restoring the base
weights, gradient checkpointing on against off) and ``generate`` (decode throughput against
the memory-bandwidth limit; HF ``generate``'s static cache and ``torch.compile``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
from gpu_common import GIB, Clock, Profile, cuda, peak, release, reset_peak, train_config

from flowgrpo.operators.tasks import load_task
from flowgrpo.trainer.algorithms.logprobs import group_logprobs, prompt_prefix
from flowgrpo.trainer.loop import setup
from flowgrpo.trainer.loop.policy import merged_adapter
from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.loop.rollout import generate_rollout


def _policy(profile: Profile, out: Path, name: str, extra: tuple[str, ...] = ()):
    cfg = train_config(profile, out / name, 1, extra)
    model, tokenizer = setup.policy(cfg, device=profile.device)
    return cfg, model, tokenizer


def _perturb_lora(model, seed: int = 0) -> None:
    """Give every LoRA B a small random value (a fresh adapter has B = 0 and changes nothing)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                noise = torch.randn(p.shape, generator=gen) * 0.02
                p.copy_(noise.to(device=p.device, dtype=p.dtype))


def part_exact(profile: Profile, out: Path) -> dict:
    """The three exactness checks on the production shape, bf16 on the device."""
    cfg, model, tokenizer = _policy(profile, out, "exact", ("lora.dropout=0.0",))
    _perturb_lora(model)
    problems = load_task("arithmetic", n=3, seed=2)
    rollout = generate_rollout(model, tokenizer, problems, 4, 1.0, 1.0, cfg.rollout.max_new_tokens)
    rows = [_prefix_vs_full(model, rollout), _merge_restores(model, tokenizer, problems)]
    rows.append(_checkpointing_grads(model, rollout))
    del model
    release()
    return {"rows": rows, "summary": {r["check"]: r["verdict"] for r in rows}}


def _prefix_vs_full(model, rollout) -> dict:
    """Log-probs of every sampled token: shared prompt prefix + KV cache against K full rows."""
    model.eval()  # the shared-prompt path needs the KV cache, off under checkpointing in train
    diffs, scale = [], []
    with torch.no_grad():
        prefix = prompt_prefix(model, rollout.prompt_ids)
        k = rollout.group_size
        for g, prompt in enumerate(rollout.prompt_ids):
            ids, mask = (
                rollout.completion_ids_NT[g * k : (g + 1) * k],
                rollout.mask_NT[g * k : (g + 1) * k],
            )
            shared, _ = group_logprobs(model, prompt, ids, mask, "shared_prompt", 1.0, None, prefix)
            full, _ = group_logprobs(model, prompt, ids, mask, "full", 1.0)
            m = mask.to(shared.device).bool()
            diffs.append((shared.float() - full.float()).abs()[m])
            scale.append(full.float().abs()[m])
    model.train()
    d, s = torch.cat(diffs), torch.cat(scale)
    return {
        "check": "shared-prefix log-probs vs full forward",
        "tokens": int(d.numel()),
        "max_abs_diff": float(d.max()),
        "mean_abs_diff": float(d.mean()),
        "mean_abs_logp": float(s.mean()),
        "prefix_tokens": 0 if prefix is None else prefix.length,
        "verdict": "exact" if float(d.max()) == 0 else f"max |diff| {float(d.max()):.3g} nats",
    }


def _merge_restores(model, tokenizer, problems) -> dict:
    """Sampling on merged LoRA weights, then the base weights compared bit for bit; beside it
    what a plain merge + unmerge would leave (why the stash exists)."""
    base = {n: p.detach().clone() for n, p in model.named_parameters() if ".base_layer." in n}
    generate_rollout(model, tokenizer, problems[:1], 2, 1.0, 1.0, 8)  # merged_adapter inside
    params = dict(model.named_parameters())
    identical = all(torch.equal(params[n], saved) for n, saved in base.items())
    with torch.no_grad():
        model.merge_adapter()
        model.unmerge_adapter()
        drift = max(
            float((params[n].float() - saved.float()).abs().max()) for n, saved in base.items()
        )
        for n, saved in base.items():
            params[n].copy_(saved)
    del base
    release()
    return {
        "check": "merged-weight sampling restores the base weights",
        "bit_identical_after_sampling": identical,
        "plain_merge_unmerge_max_drift": drift,
        "verdict": "exact" if identical else "base weights changed",
    }


def _lora_grads(model, rollout) -> tuple[torch.Tensor, float]:
    for p in model.parameters():
        p.grad = None
    k = rollout.group_size
    logp, _ = group_logprobs(model, rollout.prompt_ids[0], rollout.completion_ids_NT[:k],
                             rollout.mask_NT[:k], "full", 1.0)  # fmt: skip
    mask = rollout.mask_NT[:k].to(logp.device)
    loss = -(logp * mask).sum() / mask.sum()
    loss.backward()
    grads = [p.grad.float().flatten() for n, p in model.named_parameters() if p.grad is not None]
    return torch.cat(grads), float(loss)


def _checkpointing_grads(model, rollout) -> dict:
    """The LoRA gradient of one group's loss with gradient checkpointing on and off."""
    inner = model.get_base_model()
    model.train()
    on, loss_on = _lora_grads(model, rollout)
    inner.gradient_checkpointing_disable()
    off, loss_off = _lora_grads(model, rollout)
    inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    rel = float((on - off).norm() / off.norm().clamp_min(1e-30))
    return {
        "check": "gradient checkpointing on vs off (LoRA grads)",
        "loss_on": loss_on,
        "loss_off": loss_off,
        "grad_elements": int(on.numel()),
        "max_abs_diff": float((on - off).abs().max()),
        "relative_l2_diff": rel,
        "verdict": "exact" if rel == 0 else f"relative L2 diff {rel:.3g}",
    }


def bandwidth_tb_s() -> float:
    """Measured device-memory bandwidth (TB/s, bytes read + written) of a large copy."""
    n = (2 * GIB) // 2 if cuda() else (64 * 1024**2) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda" if cuda() else "cpu")
    dst = torch.empty_like(src)
    dst.copy_(src)
    with Clock() as clock:
        for _ in range(10):
            dst.copy_(src)
    moved = 10 * 2 * src.numel() * src.element_size()
    del src, dst
    release()
    return moved / clock.seconds / 1e12


def part_generate(profile: Profile, out: Path) -> dict:
    """Decode throughput of the rollout's own path and of plain HF ``generate`` variants."""
    cfg, model, tokenizer = _policy(profile, out, "generate")
    weights = sum(
        p.numel() * p.element_size() for n, p in model.named_parameters() if "lora_" not in n
    )
    bw = bandwidth_tb_s()
    limit = bw * 1e12 / weights  # decode steps/s if each step only read the weights once
    t = cfg.rollout.max_new_tokens
    problems = load_task("arithmetic", n=max(profile.gen_batches), seed=3)
    rows = []
    for batch in profile.gen_batches:
        run = partial(generate_rollout, model, tokenizer, problems[:batch], 1, 1.0, 1.0, t)
        label = f"rollout path (merged LoRA, prefill once), batch {batch}"
        rows.append(_throughput(label, batch, t, run))
    for cache in ("dynamic", "static"):
        run = _hf_generate(model, tokenizer, t, cache, compiled=False)
        rows.append(_throughput(f"HF generate, {cache} cache, batch 1", 1, t, run))
    del model
    release()
    summary = {"weights_gb": round(weights / 1e9, 2), "measured_bandwidth_tb_s": round(bw, 2),
               "bandwidth_limit_decode_steps_s": round(limit, 1)}  # fmt: skip
    for row in rows:
        row["share_of_limit"] = round(row["decode_steps_s"] / limit, 3)
    return {"rows": rows, "summary": summary}


def part_compile(profile: Profile, out: Path) -> dict:
    """HF ``generate`` with a static cache and ``torch.compile`` (the first call compiles)."""
    cfg, model, tokenizer = _policy(profile, out, "compile")
    t = cfg.rollout.max_new_tokens
    run = _hf_generate(model, tokenizer, t, "static", compiled=True)
    with Clock() as first:
        run()
    row = _throughput("HF generate, static cache + torch.compile, batch 1", 1, t, run)
    row["first_call_s"] = round(first.seconds, 1)
    del model
    release()
    return {"rows": [row], "summary": {"compile_first_call_s": row["first_call_s"]}}


def _hf_generate(model, tokenizer, t: int, cache: str, compiled: bool):
    """A function sampling ``t`` tokens (no early stop) from the policy's prompt on merged
    weights with HF ``generate`` and the given cache."""
    problem = load_task("arithmetic", n=1, seed=4)[0]
    ids = tokenizer(PolicyPrompt().render(problem, tokenizer), return_tensors="pt")["input_ids"]
    ids = ids.to(next(model.parameters()).device)
    extra = {"cache_implementation": "static"} if cache == "static" else {}
    if cache == "static":
        extra["disable_compile"] = not compiled

    def run():
        model.eval()  # as the rollout samples: under checkpointing, train mode drops the cache
        with torch.no_grad(), merged_adapter(model):
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                           top_k=0, max_new_tokens=t, min_new_tokens=t, pad_token_id=0,
                           **extra)  # fmt: skip

    return run


def _throughput(label: str, batch: int, t: int, run) -> dict:
    run()  # one untimed call first: kernels picked, caches allocated
    reset_peak()
    with Clock() as clock:
        run()
    return {"variant": label, "batch": batch, "new_tokens": t, "seconds": round(clock.seconds, 3),
            "tokens_s": round(batch * t / clock.seconds, 1),
            "decode_steps_s": round(t / clock.seconds, 1), **peak()}  # fmt: skip
