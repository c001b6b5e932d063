"""The fake kernel's old home: it is :mod:`pyrdmacm.testing` now."""

from .testing.fake import FakeDevice, FakeId, FakeKernel, FakeNet  # noqa: F401

__all__ = ["FakeDevice", "FakeId", "FakeKernel", "FakeNet"]
