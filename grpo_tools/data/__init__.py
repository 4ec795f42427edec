"""Datasets: canonical rows (read and check), converters from public formats, prompts, the bundled tasks."""
