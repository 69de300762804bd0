"""Helpers of the study scripts beside this folder (research/): ``study`` (intervals over
seeds, when a run collapsed, the guard's rates), ``pool`` (study tasks in several processes) and
``group_signal`` (where a run's learning signal comes from). Not installed; they use flowgrpo's
public names only (tests/test_layering.py)."""
