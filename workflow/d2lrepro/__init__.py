"""Reproduction of the optimization and computational-performance chapters of Dive into Deep
Learning."""

from d2lrepro.core.allocator import retain_freed_memory

# Every training and timing process imports the package: each one reuses freed memory.
retain_freed_memory()
