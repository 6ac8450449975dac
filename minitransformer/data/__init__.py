"""Data: vocabularies, batching and masks, synthetic and translation tasks, and the parsing
treebank of §6.3 (a grammar, its trees, and its own best parser)."""
