"""Evaluation: scoring a predictions file, generating and scoring with a model, plots, BFCL's leaderboard table."""
