"""A policy driving: the trained network as a policy, episodes and their statistics, where parallel work runs."""
