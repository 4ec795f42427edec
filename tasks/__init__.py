"""Our demo tasks and the models they train, beside the library (`grpo_tools` imports none of this): the bundled
synthetic and mapping tasks and their tool catalogue, the multi-turn data generator, the BFCL task built from the
installed bfcl-eval, the tiny offline test model and the SmolLM2-135M-Instruct conversion. Run from the repository's
root, e.g. `python -m tasks.bfcl --tokenizer outputs/smollm2-135m --out outputs/bfcl-task`."""
