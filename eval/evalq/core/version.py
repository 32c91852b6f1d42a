"""The package version, in a leaf module.

Modules that record the version (the results manifest, ``evalq --version``) import it
from here rather than from the package root, whose lazy ``__getattr__`` reaches the
Python API and through it the whole run: a leaf keeps the import graph one-directional.
"""

__version__ = "0.1.0"
