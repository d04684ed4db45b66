"""Runnable examples of ferrymq."""
