"""Shared by the trainer tests: pytest puts this folder on sys.path, so every test below it can
``import trainer_fakes`` (the test doubles) and find ``ddp_worker.py``."""
