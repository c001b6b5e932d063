# Sphinx's configuration for the reference of every public name, made from the docstrings:
#     python -m sphinx -W --keep-going -b html docs/sphinx build/docs
# (tests/test_docs.py builds it so, warnings as errors; docs/api.md is the same reference in
# Markdown, by tools/apidoc, for reading without a build).
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

project = "pyrdmacm"
extensions = ["sphinx.ext.autodoc"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
html_theme = "alabaster"
exclude_patterns = ["_build"]
