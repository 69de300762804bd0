"""Executing workflows: LLM backends, the code sandbox, the operator set, the interpreter, tasks
and answer checkers (DESIGN.md, "Execution").

    from flowgrpo.operators.backends import make_backend
    from flowgrpo.operators.interpreter import run_workflows
    from flowgrpo.operators.tasks import load_task

    llm = make_backend("hf", name_or_path="default")          # or "openai" / "scripted"
    problems = load_task("arithmetic", n=5, split="test")
    results = run_workflows([("Programmer -> Review ? Revise : done", p) for p in problems], llm)

Depends on ``dsl`` only; importing it imports neither torch nor the openai SDK.
"""
