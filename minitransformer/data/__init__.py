"""Data: vocabularies, batching and masks, synthetic and translation tasks."""
