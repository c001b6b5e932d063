"""The one enum base of pyrdmacm: kernel numbers that print by name.

Light on purpose (no construct, no pyroute2): the ABI layer, the device list
and the netlink layer all derive their kernel enums from it.
"""

from __future__ import annotations

import enum


class NamedIntEnum(enum.IntEnum):
    """An IntEnum that prints as the member's name (``ADDR_RESOLVED``, not ``1``)."""

    def __str__(self) -> str:
        return self.name

    @classmethod
    def name_of(cls, value: int) -> str:
        """The member's name, or the number as text for a value the kernel may send but we do not know."""
        try:
            return cls(value).name
        except ValueError:
            return str(value)
