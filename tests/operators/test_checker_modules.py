"""Each task domain owns its checker module, and the checkers share one copy of each helper."""

import ast
from collections import Counter
from pathlib import Path

from flowgrpo.operators.checkers import DOMAIN_CHECKERS

CHECKERS = Path(__file__).resolve().parents[2] / "operators" / "checkers"


def test_each_domain_checker_lives_in_its_domain_module():
    assert sorted(DOMAIN_CHECKERS) == ["code", "math", "qa"]
    for domain, checker in DOMAIN_CHECKERS.items():
        assert checker.__module__ == f"flowgrpo.operators.checkers.{domain}"


def test_no_helper_or_pattern_is_defined_twice_across_the_checkers():
    names = Counter()
    for path in CHECKERS.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names[node.name] += 1
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    twice = sorted(name for name, count in names.items() if count > 1 and name != "__all__")
    assert twice == [], f"defined in more than one checker module: {twice}"
