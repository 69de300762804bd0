"""``EvalSession.use_model``: a model already in memory (a policy just trained) is evaluated
exactly as the session evaluates the same weights it loads itself."""

from pathlib import Path

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.reports.eval_run import EvalOptions, EvalSession

TINY = Path(__file__).parents[3] / "configs" / "tiny.yaml"


def test_a_model_in_memory_gives_the_result_of_the_same_weights_loaded():
    run = load_config(TINY, ("rollout.constrained=grammar",))  # valid workflows, executed
    options = EvalOptions(n=2, k=3, temperature=1.0)
    loaded = EvalSession(run, options)
    loaded.load()  # tiny-random seeded by the run's optim.seed
    given = EvalSession(run, options)
    model, tokenizer = build_tiny_model(seed=run.optim.seed)
    model.train()  # use_model puts it in eval mode
    given.use_model(model, tokenizer, described="a policy just trained")
    assert not given.model.training and given.limits == loaded.limits
    a, b = loaded.evaluate(), given.evaluate()
    assert b.pop("model") == "a policy just trained"
    a.pop("model")
    for result in (a, b):
        result.pop("seconds", None)
        result.pop("samples_per_s", None)
    assert a["validity_rate"] == 1.0 and a["samples"] == 6  # the grammar reached the eval
    assert a == b
