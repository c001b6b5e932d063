# Sphinx's configuration of pyrdmacm's documentation, the one generator of its reference:
#     python -m sphinx -W --keep-going -b html docs/sphinx build/docs
# (tests/test_docs.py builds it so, warnings as errors). The guides are the Markdown files of
# docs/ (read by myst-parser, so that they read the same in the source distribution); the
# reference of every public name is made from the docstrings (autodoc); the command line's
# reference of every subcommand's --help from the parser itself (the directive below).
import os
import sys

from docutils import nodes
from docutils.parsers.rst import Directive

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

project = "pyrdmacm"
extensions = ["sphinx.ext.autodoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
html_theme = "alabaster"
exclude_patterns = ["_build"]


class CommandHelp(Directive):
    """``.. pyrdmacm-help::``: ``pyrdmacm --help`` and each subcommand's --help, as the
    parser prints them, a section each."""

    def run(self):
        from pyrdmacm.cli import build_parser

        parser = build_parser()
        out = []
        for name, sub in [("pyrdmacm", parser), *sorted(("pyrdmacm " + n, p) for n, p in parser._subcommands.items())]:
            section = nodes.section(ids=["help-" + name.replace(" ", "-")])
            section += nodes.title(text=name)
            text = sub.format_help().replace(os.path.basename(sys.argv[0]), "pyrdmacm")
            section += nodes.literal_block(text, text)
            out.append(section)
        return out


def setup(app):
    app.add_directive("pyrdmacm-help", CommandHelp)
