"""The one packaging rule pyproject.toml cannot state: the wheel ships the repository's
top-level ``recipes/`` as the data package ``evalq._recipes`` (evalq.core.locations reads it
there once installed, and reads ``recipes/`` itself from a checkout).

``[tool.setuptools.packages.find]`` only discovers folders under ``eval/``, and a
``package-dir`` entry for a package it did not discover is ignored, so discovery plus
the mapped package are listed here. Everything else (metadata, dependencies, package
data) stays in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

setup(
    packages=[*find_namespace_packages("eval", include=["evalq", "evalq.*"]),
              "evalq._recipes", "evalq._recipes.base"],
    package_dir={"": "eval", "evalq._recipes": "recipes"},
)
