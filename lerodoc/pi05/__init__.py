"""pi0.5 (openpi pi05): the model, its lerobot-compatible weights and named presets."""
