"""The best single workflow by search (``flowgrpo search``): the baseline before RL.

Holds: ``halving`` (sequential halving under a budget of executor calls: pure, no torch),
``run`` (the search wired to a run's config: its training problems, executor, call budget and
reward; the JSON it saves; SFT pairs of the winner), ``by_label`` (one search per label) and
``table`` (a saved search's pick as a ``problem -> workflow``, for ``flowgrpo eval --search``).

May import: ``flowgrpo.trainer.config``, ``.loop`` (the run environment and the executor
builder), and every package below the trainer. The CLI imports it.
"""
