"""Multi-turn tool use: the tool environment, rollouts, trajectories and the bundled multi-turn task."""
