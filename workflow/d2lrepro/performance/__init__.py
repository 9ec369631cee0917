"""The computational-performance chapter: one module per experiment."""
