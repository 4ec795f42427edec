"""One-off probes and the dataset transforms of experiments (docs/findings.md cites them), run from the repository's
root as `python -m experiments.<name>`; nothing here is a product or a benchmark."""
