"""The models we build offline: the tiny test model and the SmolLM2 conversion, with their provenance."""
