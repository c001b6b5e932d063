"""Registers the kernel tier (tests/labplugin.py): see its docstring."""

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest_plugins = ["labplugin"]


@pytest.fixture
def sigint_raises():
    """SIGINT raising KeyboardInterrupt in this process while a test sends it to itself (the
    CLI's Ctrl-C tests), whatever the runner's disposition: a process started in the
    background without job control inherits SIGINT ignored, and there such a test would wait
    for ever for a signal that never comes.  The disposition before is restored after."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
