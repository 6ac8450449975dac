"""One file per paper component, each with its forward and backward side by side."""
