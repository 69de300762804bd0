"""The search's pick as a policy (``trainer/search/table.py``, ``flowgrpo eval --search``)."""

import pytest

from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.search.table import load_search_pick, search_pick

BY_LEVEL = {
    "easy": "Programmer",
    "medium": "AnswerGenerate",
    "hard": "Custom -> Review ? Revise : done",
}
NOT_SEARCHES = [{}, {"top": []}, [1, 2], {"labels": {"easy": {"top": []}}, "by": ["difficulty"]}]


def _labelled(table=BY_LEVEL, keys=("difficulty",)) -> dict:
    labels = {
        label: {"top": [{"workflow": w}, {"workflow": "Custom"}]} for label, w in table.items()
    }
    return {"by": list(keys), "labels": labels}


def _problem(level: str) -> Problem:
    return Problem(f"p-{level}", "math", "What is 2 + 2?", "4", meta={"difficulty": level})


def test_a_plain_search_picks_its_first_workflow_for_every_problem():
    pick = search_pick({"top": [{"workflow": "Programmer"}, {"workflow": "Custom"}]})
    assert {pick(_problem(level)) for level in BY_LEVEL} == {"Programmer"}


def test_a_per_label_search_picks_each_problems_own_labels_first():
    pick = search_pick(_labelled())
    assert {level: pick(_problem(level)) for level in BY_LEVEL} == BY_LEVEL


def test_a_label_the_table_lacks_is_an_error_naming_it():
    pick = search_pick(_labelled({"easy": "Programmer"}))
    with pytest.raises(ValueError, match="no workflow for label 'hard'"):
        pick(_problem("hard"))


@pytest.mark.parametrize("data", NOT_SEARCHES)
def test_a_file_that_is_not_a_search_result_is_an_error_that_says_how_to_make_one(data):
    with pytest.raises(ValueError, match="flowgrpo search"):
        search_pick(data)


def test_a_missing_or_broken_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_search_pick(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable JSON file"):
        load_search_pick(tmp_path / "bad.json")
