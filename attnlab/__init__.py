"""attnlab: the mathematics and the structure of transformer attention."""

__version__ = "0.1.0"
