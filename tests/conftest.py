"""Registers the kernel tier (tests/labplugin.py): see its docstring."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest_plugins = ["labplugin"]
