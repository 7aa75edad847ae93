"""CarRacing as the policy sees it: the environment, its frames, the scenarios, the seed ranges, the perturbations."""

import os

# pygame greets on stdout when first imported, which would mix into the commands' output (leaderboards, JSON, the reference)
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
