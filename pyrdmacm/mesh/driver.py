"""The fabric check's cell driver: each cell is a chain of commands on one id, each answered by
its event, which the channel's read (the asyncio adapter's reader) delivers to the cell, and
which makes the next command; at most ``concurrency`` cells are in flight.

A cell is one object: a wait of the channel (:class:`~pyrdmacm.Waiter`) that is given its
id's events one step after another (resolve the address, the route, connect; disconnect when a
listener accepted).  No Task, future or coroutine per cell or per step, and one timer for the
whole run, which ends the steps that had no answer in time: in a 1,000-cell run the driving
machinery (three ``wait_for`` Tasks and timers and three outcome futures a cell) cost more
Python than the commands themselves.  What a cell finds is the engine's to explain
(:func:`pyrdmacm.mesh.engine.check_async`); what it records is :class:`~pyrdmacm.mesh.cells.Cell`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

from ..core.router import Waiter, take_of
from ..abi import CmEventType as E
from ..errors import RdmaCmError
from ..state import Call
from .cells import Cell, parse_identity
from .path import mismatches, qp_view, view_of_words, where

#: how often the run looks for steps past their deadline (s)
TICK = 0.05

_MONOTONIC = time.monotonic


class Run:
    """One run's cells: those waiting to start, those in flight, and the failed ones being
    explained; ``finished`` is done when none is left.  ``on_cell`` sees each cell as it ends
    (a failed one once ``explain``, which returns a future of the explanation's lines, has
    explained it)."""

    def __init__(self, ach: Any, work: List[Tuple[Cell, Any, Any]], ps: Any, timeout_ms: int, devs: Any,
                 gids: Any, concurrency: int, on_cell: Callable[[Cell], None],
                 explain: Callable[[Cell], "asyncio.Future[List[str]]"]) -> None:
        self.loop = asyncio.get_running_loop()
        self.ch, self.ps, self.timeout_ms, self.devs, self.gids = ach.channel, ps, timeout_ms, devs, gids
        #: seconds a resolve step may take (the kernel's own ADDR_ERROR / ROUTE_ERROR comes at
        #: timeout_ms), and a connect or a disconnect
        self.resolve_s, self.answer_s = timeout_ms / 1000.0 + 1.0, timeout_ms / 1000.0
        self.concurrency, self.on_cell, self.explain = concurrency, on_cell, explain
        self.todo: Iterator[Tuple[Cell, Any, Any]] = iter(work)
        self.flying: Set["CellRun"] = set()
        self.explaining: Dict["asyncio.Future[List[str]]", Cell] = {}
        self.finished: "asyncio.Future[None]" = self.loop.create_future()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._filling = False
        self._fill()

    def _fill(self) -> None:
        """Start cells until ``concurrency`` fly or none is left.  A loop, not a recursion: a
        cell refused at once ends inside its start, and the loop starts the next."""
        if self._filling:
            return  # a cell ended while the loop below started it: the loop goes on
        self._filling = True
        try:
            flying = self.flying
            while len(flying) < self.concurrency:
                item = next(self.todo, None)
                if item is None:
                    break
                run = CellRun(self, *item)
                flying.add(run)
                run.begin()
        finally:
            self._filling = False
        if self._timer is None and self.flying:
            self._timer = self.loop.call_later(TICK, self._tick)
        self._check_done()

    def _tick(self) -> None:
        """End the steps past their deadline; look again in a tick while cells fly."""
        self._timer = None
        now = _MONOTONIC()
        for run in [r for r in self.flying if r.deadline <= now]:
            run.expire()
        if self.flying and self._timer is None:
            self._timer = self.loop.call_later(TICK, self._tick)

    def cell_done(self, run: "CellRun") -> None:
        """``run``'s cell has its outcome: it is handed on (explained first when it failed),
        and the next cell starts."""
        self.flying.discard(run)
        cell = run.cell
        if cell.ok:
            self._report(cell)
        else:
            fut = self.explain(cell)
            self.explaining[fut] = cell
            fut.add_done_callback(self._explained)
        self._fill()

    def _explained(self, fut: "asyncio.Future[List[str]]") -> None:
        cell = self.explaining.pop(fut, None)
        if cell is None:  # stopped: reported already
            return
        if not fut.cancelled() and fut.exception() is None:
            cell.why = fut.result()
        self._report(cell)
        self._check_done()

    def _report(self, cell: Cell) -> None:
        """``on_cell(cell)``; what it raises (a closed output) ends the run with that error."""
        try:
            self.on_cell(cell)
        except Exception as e:  # noqa: BLE001 - the run's awaiter raises it
            if not self.finished.done():
                self.finished.set_exception(e)

    def _check_done(self) -> None:
        # flying empty means the cells to start are gone too: each end starts the next
        if not self.flying and not self.explaining and not self.finished.done():
            self.finished.set_result(None)

    def stop(self, report: bool = True) -> None:
        """The run was cancelled (Ctrl-C) or failed: the cells in flight stop where they are
        (their ids destroyed); with ``report`` they and those being explained are reported as
        they are."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.todo = iter(())
        stopped = [run.cell for run in self.flying]
        for run in list(self.flying):
            run.abandon()
        self.flying.clear()
        stopped += self.explaining.values()
        self.explaining.clear()
        for cell in stopped if report else ():
            self._report(cell)


class CellRun(Waiter):
    """One cell in flight: its id, the step it waits for, and that step's deadline."""

    __slots__ = ("run", "cell", "src", "dst", "cm", "step", "t0", "deadline", "outcome_kept")

    def __init__(self, run: Run, cell: Cell, src: Any, dst: Any) -> None:
        super().__init__({})
        self.run, self.cell, self.src, self.dst = run, cell, src, dst
        self.cm: Any = None
        self.step = ""
        self.t0 = self.deadline = 0.0
        #: (outcome, detail) kept through the disconnect of an established cell
        self.outcome_kept: Optional[Tuple[str, Optional[str]]] = None

    # -- the steps
    def begin(self) -> None:
        run = self.run
        try:
            self.cm = run.ch.create_id(run.ps)
        except RdmaCmError as e:
            self._refused(e)
            return
        self._do("addr", Call.RESOLVE_ADDR, run.resolve_s, self.cm.resolve_addr, self.dst, src=self.src,
                 timeout_ms=run.timeout_ms)

    def _do(self, step: str, call: Call, wait_s: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Make the step's command; its outcome event comes to :meth:`deliver`."""
        cm = self.cm
        self.step, self.take = step, take_of(cm.kind, call)
        self.t0 = now = _MONOTONIC()
        self.deadline = now + wait_s
        try:
            fn(*args, **kwargs)
        except RdmaCmError as e:  # refused at once (EADDRNOTAVAIL, ENETUNREACH, ENODEV ...)
            self._timed()
            if self.outcome_kept is not None:  # the disconnect: the peer's came first, the id is down
                return self._finish()
            return self._refused(e)
        self.run.ch.expect(cm.uid, self)

    def deliver(self, uid: int, ev: Any, ok: bool) -> None:
        """The step's event: the next step, or the cell's outcome.  Called by the channel's
        read: it never raises (a fault is the cell's outcome)."""
        self._timed()
        cell = self.cell
        try:
            step = self.step
            if step == "addr":
                if ev.event is not E.ADDR_RESOLVED or ev.status:
                    cell.outcome, cell.status, cell.detail = "addr-error", ev.status, ev.status_name or ev.event.name
                    return self._finish()
                return self._do("route", Call.RESOLVE_ROUTE, self.run.resolve_s, self.cm.resolve_route,
                                self.run.timeout_ms)
            if step == "route":
                if ev.event is not E.ROUTE_RESOLVED or ev.status:
                    cell.outcome, cell.status, cell.detail = "route-error", ev.status, ev.status_name or ev.event.name
                    return self._finish()
                self._where()
                return self._do("connect", Call.CONNECT, self.run.answer_s, self.cm.connect, qp_num=None,
                                responder_resources=1, initiator_depth=1)
            if step == "connect":
                return self._answered(ev)
            self._finish()  # the disconnect's DISCONNECTED
        except RdmaCmError as e:
            if self.step:
                self._refused(e)
        except Exception as e:  # noqa: BLE001 - never into the channel's read: the cell says it
            if self.step:
                cell.outcome, cell.detail = "refused", "%s: %s" % (type(e).__name__, e)
                self._finish()

    def _where(self) -> None:
        """Where the route landed and the path the data will take (QUERY_ROUTE and QUERY PATH;
        the device named from the run's list: no sysfs read a cell)."""
        cell, run = self.cell, self.run
        w = where(self.cm, run.devs, run.gids)
        cell.device, cell.port, cell.sgid, cell.dgid = w["device"], w["port"], w["sgid"], w["dgid"]
        cell.gid_index, cell.gid_type, cell.path = w["gid_index"], w["gid_type"], w["path"]

    def _answered(self, ev: Any) -> None:
        """The connect's answer: REJ (reason 8: nobody listens, the path works), no answer,
        or a REP (the RTU sent, the listener's identity read, then a disconnect)."""
        cell = self.cell
        if ev.event is E.REJECTED:
            cell.status = ev.status
            cell.outcome = "no-listener" if ev.status == 8 else "rejected"
            cell.detail = "REJ reason %d%s" % (ev.status, " (%s)" % ev.status_name if ev.status_name else "")
            return self._finish()
        if ev.event is not E.CONNECT_RESPONSE or ev.status:
            cell.outcome, cell.status = "unreachable", ev.status
            cell.detail = "%s%s" % (ev.event.name, " (%s)" % ev.status_name if ev.status_name else "")
            return self._finish()
        cell.qp = qp_view(self.cm)  # what a QP would be given, before the RTU
        self.cm.establish()  # the RTU: the listener gets ESTABLISHED
        cell.outcome = "established"
        who = parse_identity(ev.param.private_data)
        if who is not None:
            cell.agent = {k: who[k] for k in ("host", "rail", "addr") if k in who}
            cell.there = view_of_words(who)
            if cell.path:
                cell.mismatches = mismatches(cell.view(), cell.there)
            if who.get("addr") not in (None, (cell.dst or "").split("%")[0]):
                cell.outcome = "wrong-host"
                cell.detail = "answered by %s (rail %s, address %s), not %s" % (
                    who.get("host"), who.get("rail"), who.get("addr"), cell.dst)
        self.outcome_kept = (cell.outcome, cell.detail)
        self._do("disconnect", Call.DISCONNECT, self.run.answer_s, self.cm.disconnect)

    def end(self, uid: int, error: BaseException) -> None:
        """The wait ended without its event (the channel closed under the run): the cell stays
        as it is."""
        if self.step:
            self._timed()
            self._finish()

    def expire(self) -> None:
        """No answer to the step in time: a timeout, unless the step was the disconnect (no
        DREP in time: the handshake itself was fine)."""
        self._timed()
        cell = self.cell
        if self.outcome_kept is None:
            cell.outcome, cell.detail = "timeout", "no answer to %s within %.1f s" % (
                self.step, self.deadline - self.t0)
        self._finish()

    def abandon(self) -> None:
        """The run was stopped: the id goes, the cell stays as it is."""
        self.step = ""
        self._destroy()

    # -- the end
    def _timed(self) -> None:
        self.cell.ms[self.step] = round((_MONOTONIC() - self.t0) * 1000, 3)

    def _refused(self, e: RdmaCmError) -> None:
        from ..errors import error_object

        cell = self.cell
        errno_ = getattr(e, "errno", None)
        cell.outcome, cell.status = "refused", -errno_ if errno_ else None  # negative, as an event's status
        cell.error = error_object(e, refused=getattr(e, "command", None))
        cell.detail = cell.error["name"] or str(e)
        self._finish()

    def _finish(self) -> None:
        if self.outcome_kept is not None:
            self.cell.outcome, self.cell.detail = self.outcome_kept
        self.step = ""  # no event or end of the id counts any more
        self._destroy()
        self.run.cell_done(self)

    def _destroy(self) -> None:
        cm, self.cm = self.cm, None
        if cm is not None:
            try:
                cm.destroy()
            except RdmaCmError:
                pass  # the channel was closed: the id went with it
