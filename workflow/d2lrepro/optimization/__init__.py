"""The optimization chapter: one module per experiment."""
