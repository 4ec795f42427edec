"""Training: the config, the adaptive KL controller, the trainer, the warm start and a recipe's run."""
