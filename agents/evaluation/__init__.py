"""Closed-loop evaluation: the leaderboard of runs and experts, latency and simulator benchmarks."""
