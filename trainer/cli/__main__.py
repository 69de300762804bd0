"""``python -m flowgrpo.trainer.cli`` (and ``accelerate launch -m flowgrpo.trainer.cli train``)."""

from flowgrpo.trainer.cli.app import main

main()
