"""Only the C extension lives here (setuptools' pyproject table for it is still experimental);
everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

# Near-duplicate hashing in C (crawler/dedup/simhash.py says why). Optional: without a compiler
# the install goes on and the pure-Python version gives the same values, slower.
setup(ext_modules=[Extension("crawler.dedup._simhash", ["crawler/dedup/_simhash.c"], optional=True)])
