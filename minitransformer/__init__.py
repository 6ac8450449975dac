"""minitransformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017),
with every forward and backward pass written by hand in NumPy (or CuPy)."""

__version__ = "0.1.0"
