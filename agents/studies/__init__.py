"""Studies: grids of heads, recipes and training seeds, driven alike, and their rliable reports."""
