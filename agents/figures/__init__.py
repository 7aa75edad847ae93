"""What a run shows: evaluation videos, explanation figures, saliency."""
