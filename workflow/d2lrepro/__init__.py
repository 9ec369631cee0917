"""Reproduction of the optimization and computational-performance chapters of Dive into Deep
Learning."""
