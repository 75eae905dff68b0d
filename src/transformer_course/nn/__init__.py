"""The Transformer itself, written out with torch and the standard library only.

One module per piece (the package docstring lists them); import from the module that defines a
name, e.g. ``from transformer_course.nn.model import Transformer, TransformerConfig``, so every
name has one import path.
"""
