"""Training: demonstrations recorded, behaviour cloning, augmentations, DAgger, PilotNet for Udacity."""
