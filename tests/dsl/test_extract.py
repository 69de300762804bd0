"""Finding the workflow in raw model output; prose is a fallback, nothing is repaired."""

import pytest

from flowgrpo.dsl import extract

W = "Custom -> Programmer -> Review ? Revise : done"

# (model output, extracted workflow text or None, source)
CASES = [
    (W, W, "line"),
    (f"  {W}  \n", W, "line"),
    (f"Here is my plan.\n{W}\nThis should work.", W, "line"),
    (f"```\n{W}\n```", W, "fence"),
    (f"Sure!\n```dsl\n{W}\n```\nDone.", W, "fence"),
    (f"```text\nWorkflow for the problem:\n{W}\n```", W, "fence"),
    (f"<workflow>{W}</workflow>", W, "tag"),
    (f"<workflow>\n  {W}\n</workflow> and some words", W, "tag"),
    (f"Workflow: {W}", W, "prefix"),
    (f"**Workflow:** {W}", W, "prefix"),
    (f"DSL: {W}", W, "prefix"),
    (f"I will use `{W}` for this.", W, "line"),
    # an explicit container that does not parse is still the model's workflow attempt
    ("<workflow>Custom -> Review ? Revise</workflow>", "Custom -> Review ? Revise", "tag"),
    ("Workflow: Custom ->", "Custom ->", "prefix"),
    ("Custom -> Revew -> Format", "Custom -> Revew -> Format", "line"),
    # prose is a fallback, never repaired into a workflow
    ("### Step 1: Analyze the problem\nWe add 3 and 4 to get 7.", None, None),
    ("The answer is 42.", None, None),
    ("Sure", None, None),
    ("Answer", None, None),
    ("", None, None),
    ("Workflow:", None, None),
    ("To solve this, I would first use a Custom operator and then review it.", None, None),
]


@pytest.mark.parametrize(("output", "dsl", "source"), CASES)
def test_extraction_table(output, dsl, source):
    found = extract(output)
    assert found.dsl == dsl
    assert found.fallback == (dsl is None)
    assert found.source == source


def test_a_parsing_candidate_wins_over_an_earlier_broken_one():
    output = f"<workflow>Custom -></workflow>\n```\n{W}\n```"
    found = extract(output)
    assert found.dsl == W and found.parses and found.source == "fence"


def test_exact_is_true_only_when_nothing_surrounds_the_workflow():
    assert extract(W).exact
    assert extract(f"\n{W}\n").exact
    assert not extract(f"Workflow: {W}").exact


def test_conditional_is_never_rewritten():
    """The original system rewrote 'X ? Y : done' into 'X -> Y'. Extraction returns it as is."""
    found = extract("Custom -> Review ? Revise : done")
    assert found.dsl == "Custom -> Review ? Revise : done"


def test_extract_rejects_non_strings():
    with pytest.raises(TypeError):
        extract(None)  # type: ignore[arg-type]
