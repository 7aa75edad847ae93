"""CarRacing as the policy sees it: the environment, its frames, the scenarios, the seed ranges, the perturbations."""
