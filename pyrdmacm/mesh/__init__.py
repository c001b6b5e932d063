"""The fabric check: from each local rail (an RDMA netdev with an address), does the
connection manager's whole path reach each target -- address resolution, route, GIDs,
the CM's handshake -- and if not, why not.

One event channel drives every cell (a rail and a target) through the asyncio adapter,
with a bound on the attempts in flight.  A cell tries what ``pyrdmacm ping`` tries once:
resolve the address from the rail's source, resolve the route, send a REQ (no QP: the
kernel never looks at one for a user-space id) and, if the peer accepts, the RTU and a
disconnect.  A REJ with reason 8 (no listener on that service id) proves the whole CM
path with no program on the far end; a listener that answers (``pyrdmacm listen
--identify``) proves it reached the host it meant to.  A cell that fails carries the
kernel's status and the pre-check's explanation of why.

:func:`rails` finds the rails, :func:`check` runs the cells (:func:`check_async` in a
running loop), :mod:`pyrdmacm.mesh.render` draws them (table, SVG, Prometheus text
file), :func:`merge` joins the runs of many hosts into one matrix.
"""

from __future__ import annotations

from .cells import OUTCOMES, Cell, Rail, Target
from .engine import check, check_async, rails
from .merge import Matrix, merge

__all__ = ["OUTCOMES", "Cell", "Matrix", "Rail", "Target", "check", "check_async", "merge", "rails"]
