"""lambo's version: one line, read by pyproject (setuptools), build_zipapp.py and the code."""

__version__ = "0.1.0"
