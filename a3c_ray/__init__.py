"""a3c-ray: distributed A3C (asynchronous advantage actor-critic) on Ray."""

__version__ = "0.1.0"
