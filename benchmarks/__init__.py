"""The scripts behind `make bench` and `make bench-learning`, run from the repository's root as
`python -m benchmarks.<name>` (docs/benchmarks.md has their figures)."""
