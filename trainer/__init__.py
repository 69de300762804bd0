"""The LoRA GRPO trainer and the ``flowgrpo`` command line (see DESIGN.md, "Training").

Nothing heavy is imported here: ``import trainer`` does not import torch.
"""
