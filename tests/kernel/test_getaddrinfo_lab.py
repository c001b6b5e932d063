"""pyrdmacm.getaddrinfo against librdmacm's rdma_getaddrinfo, row by row, in the lab.

Each row of ``ROWS`` goes through tools/parity/getaddrinfo_case.c (built here against the
installed librdmacm) and through :func:`pyrdmacm.getaddrinfo` with the same node, service and
hints; the records must agree in flags, family, QP type, port space and both addresses (every
sockaddr field: ports, scope ids, AF_IB's pkey, service id and mask), and a row librdmacm
refuses must be refused here with the same EAI code named.  Names come from the guest's
/etc/hosts (``localhost``), services from its services database (``ssh``).

Facts this table pins (see the notes of the rows):
- librdmacm takes the C library's first answer only, and passes no hints at all when it is
  given none (so the C library's AI_V4MAPPED | AI_ADDRCONFIG apply);
- the answer's ai_flags is RAI_PASSIVE or 0: the hint flags are not echoed, except when
  there is neither node nor service (then the hints are the record);
- AF_IB is made only of a numeric IPv6 answer with RAI_FAMILY and RAI_NUMERICHOST; its
  service id is (port space << 16) + port with mask 0xffffffffffff0000 | 0xffff;
- with no ibacm running, no route or connect data and no canonical names come back;
- rdma_getaddrinfo answers EAI codes (negative) as its return value, errno untouched.

Topology "single": eth0 10.0.2.15/24 + fec0::15/64 with rxe0.  The answers are the C
library's and librdmacm's, not the kernel's; the rows run on the oldest and newest lab
kernels (the lab guest runs the host's librdmacm on each).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from pyrdmacm import NameServiceError, PortSpace, QpType, UsageError
from pyrdmacm.addr import AF_IB, AF_INET, AF_INET6, unpack_sockaddr
from pyrdmacm.addrinfo import RaiFlag, getaddrinfo

pytestmark = pytest.mark.kernel(suites=("bullseye", "sid"))

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tools" / "parity" / "getaddrinfo_case.c"

P, N, R, F = RaiFlag.PASSIVE, RaiFlag.NUMERICHOST, RaiFlag.NOROUTE, RaiFlag.FAMILY

#: (name, node, service, flags (None: no hints at all), family, qp type, port space, src, dst)
ROWS: List[Tuple[str, Optional[str], Optional[str], Optional[int], int, int, int, Optional[str], Optional[str]]] = [
    ("name, no hints", "localhost", "7471", None, 0, 0, 0, None, None),
    ("name, no route", "localhost", "7471", R, 0, 0, 0, None, None),
    ("name as IPv4", "localhost", "7471", R | F, AF_INET, 0, 0, None, None),
    ("name as IPv6", "localhost", "7471", R | F, AF_INET6, 0, 0, None, None),
    ("numeric v4", "10.0.2.15", "7471", N, 0, 0, 0, None, None),
    ("numeric v4, route", "10.0.2.15", "7471", N | R, 0, 0, 0, None, None),
    ("numeric v6", "fec0::15", "7471", N | R, 0, 0, 0, None, None),
    ("v6 with zone", "fe80::1%eth0", "7471", N | R, 0, 0, 0, None, None),
    ("v6 with numeric zone", "fe80::1%1", "7471", N | R | F, AF_INET6, 0, 0, None, None),
    ("passive, no node", None, "7471", P, 0, 0, 0, None, None),
    ("passive, v6 any", None, "7471", P | F, AF_INET6, 0, 0, None, None),
    ("passive, node", "10.0.2.15", "7471", P | N, 0, 0, 0, None, None),
    ("passive, UD", None, "7174", P, 0, int(QpType.UD), 0, None, None),
    ("UD", "10.0.2.15", "7174", N | R, 0, int(QpType.UD), 0, None, None),
    ("UDP port space", "10.0.2.15", "7174", N | R, 0, 0, int(PortSpace.UDP), None, None),
    ("IB port space, RC", "10.0.2.15", "7471", N | R, 0, int(QpType.RC), int(PortSpace.IB), None, None),
    ("IPoIB port space", "10.0.2.15", "7471", N | R, 0, 0, int(PortSpace.IPOIB), None, None),
    ("service name", "10.0.2.15", "ssh", N | R, 0, 0, 0, None, None),
    ("source hint kept", "10.0.2.15", "7471", N | R, 0, 0, 0, "10.0.2.15#9", None),
    ("AF_IB", "fe80::2:c903:0:1", "7471", N | R | F, AF_IB, 0, 0, None, None),
    ("AF_IB, UD", "fec0::15", "7174", N | R | F, AF_IB, int(QpType.UD), 0, None, None),
    ("AF_IB, passive", "fe80::2:c903:0:1", "7471", P | N | F, AF_IB, 0, 0, None, None),
    ("AF_IB, passive, v6 any", None, "0", P | N | F | R, AF_IB, 0, 0, None, None),
    ("AF_IB of an IPv4 answer", "10.0.2.15", "7471", N | R | F, AF_IB, 0, 0, None, None),
    ("AF_IB without numeric host", "fec0::15", "7471", R | F, AF_IB, 0, 0, None, None),
    ("neither node nor service", None, None, P | R | F, AF_INET, int(QpType.UD), int(PortSpace.UDP), "10.0.2.15#7",
     "10.0.2.2#8"),
    ("numeric host refuses a name", "localhost", "7471", N, 0, 0, 0, None, None),
    ("unknown service", "10.0.2.15", "no-such-service", N | R, 0, 0, 0, None, None),
    ("service not for UD", "10.0.2.15", "ssh", N | R, 0, int(QpType.UD), 0, None, None),
    ("UD over TCP", "10.0.2.15", "7471", N | R, 0, int(QpType.UD), int(PortSpace.TCP), None, None),
]


def _words(row: Tuple[Any, ...]) -> List[str]:
    _, node, service, flags, family, qpt, ps, src, dst = row
    return [node or "-", service or "-", "nohints" if flags is None else str(int(flags)), str(family), str(qpt),
            str(ps), src or "-", dst or "-"]


@pytest.fixture(scope="module")
def librdmacm(tmp_path_factory: Any) -> List[Dict[str, Any]]:
    exe = tmp_path_factory.mktemp("getaddrinfo") / "getaddrinfo_case"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-o", str(exe), str(SOURCE), "-lrdmacm"], check=True,
                   capture_output=True, text=True)
    argv = [str(exe)] + [w for row in ROWS for w in _words(row)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120).stdout
    answers: List[Dict[str, Any]] = json.loads(out)
    assert len(answers) == len(ROWS)
    return answers


def _hint(text: Optional[str]) -> Optional[Any]:
    if text is None:
        return None
    host, _, port = text.partition("#")
    ip = ipaddress.ip_address(host)
    return (host, int(port)) if ip.version == 4 else (host, int(port), 0, 0)


def _ours(row: Tuple[Any, ...]) -> Any:
    _, node, service, flags, family, qpt, ps, src, dst = row
    f = flags or 0
    return getaddrinfo(node, service, passive=bool(f & P), numeric_host=bool(f & N), no_route=bool(f & R),
                       family=family, qp_type=qpt or None, port_space=ps or None, src=_hint(src), dst=_hint(dst))


def _sockaddr(text: str) -> Any:
    return unpack_sockaddr(bytes.fromhex(text)) if text else None


def _eai_name(code: int) -> str:
    for name in dir(socket):
        if name.startswith("EAI_") and getattr(socket, name) == code:
            return name
    return "EAI %d" % code


#: rows where librdmacm answers something pyrdmacm refuses, and why
KNOWN = {
    "AF_IB, passive, v6 any": "the C library's first passive answer with no node is 0.0.0.0 (IPv4), which "
                              "librdmacm misreads as the next row's (the GID's last 8 bytes and the scope id read "
                              "past the answer's end); pyrdmacm answers the AF_IB wildcard, the zero GID (the "
                              "kernel's cma_any_addr), with librdmacm's pkey, service id and mask",
    "AF_IB of an IPv4 answer": "librdmacm's ucma_convert_in6 reads the C library's IPv4 answer (a 16-byte "
                               "sockaddr_in) as a sockaddr_in6: the IPv4 address becomes the flow label, sin_zero "
                               "the GID's first 8 bytes, and the GID's last 8 are read past the answer's end; "
                               "pyrdmacm refuses an IPv4 node for AF_IB",
}


def _known(row: Tuple[Any, ...], theirs: Dict[str, Any]) -> None:
    """The misread of an IPv4 answer as AF_IB: what librdmacm answers, and pyrdmacm's answer
    (the wildcard) or refusal (an IPv4 node)."""
    assert theirs["ret"] == 0 and len(theirs["records"]) == 1, theirs
    lib = theirs["records"][0]
    raw = bytes.fromhex(lib["src"] if row[3] & P else lib["dst"])
    assert lib["ai_family"] == AF_IB and len(raw) == 48, lib
    assert raw[4:8] == ipaddress.IPv4Address(row[1] or "0.0.0.0").packed, "the flow label holds the IPv4 address"
    assert raw[8:16] == bytes(8), "the GID's first 8 bytes are sin_zero"
    if row[1] is not None:
        with pytest.raises(UsageError, match="IPv4"):
            _ours(row)
        return
    ours = _ours(row)  # sockaddr_ib: family, pkey, flow label, GID (16), sid, sid mask, scope id
    mine = ours.src.pack_sockaddr()
    assert ours.family == AF_IB and ours.src.ip == ipaddress.IPv6Address(0) and ours.dst is None
    assert mine[:16] == raw[:16] and mine[24:40] == raw[24:40], (mine.hex(), raw.hex())
    assert mine[16:24] == bytes(8) and mine[40:] == bytes(8)  # where librdmacm reads past its answer


@pytest.mark.parametrize("index", range(len(ROWS)), ids=[r[0] for r in ROWS])
def test_getaddrinfo_answers_as_librdmacm(librdmacm: List[Dict[str, Any]], index: int) -> None:
    row, theirs = ROWS[index], librdmacm[index]
    if row[0] in KNOWN:
        return _known(row, theirs)
    if theirs["ret"] != 0:
        assert theirs["ret"] != -1, "librdmacm failed with errno %d, not an EAI code: %r" % (theirs["errno"], theirs)
        with pytest.raises((UsageError, NameServiceError)) as e:
            _ours(row)
        assert _eai_name(theirs["ret"]) in str(e.value), (theirs, str(e.value))
        if isinstance(e.value, NameServiceError):  # the C library's refusal: librdmacm returns its code
            assert e.value.errno == theirs["ret"], (theirs, e.value.errno)
        return
    assert len(theirs["records"]) == 1, "librdmacm answered %d records (ibacm running?)" % len(theirs["records"])
    lib = theirs["records"][0]
    # no ibacm in the lab: no route or connect data; canonical names are never asked for
    assert (lib["route_len"], lib["connect_len"], lib["src_canonname"], lib["dst_canonname"]) == (0, 0, False, False)
    ours = _ours(row)
    got = {"flags": int(ours.flags), "family": ours.family, "qp_type": int(ours.qp_type or 0),
           "port_space": int(ours.port_space or 0), "src": ours.src, "dst": ours.dst}
    want = {"flags": lib["ai_flags"], "family": lib["ai_family"], "qp_type": lib["ai_qp_type"],
            "port_space": lib["ai_port_space"], "src": _sockaddr(lib["src"]), "dst": _sockaddr(lib["dst"])}
    assert got == want, "%s: pyrdmacm %r, librdmacm %r" % (row[0], got, want)


def test_the_prediction_is_what_the_kernel_does() -> None:
    """Where librdmacm would ask ibacm, getaddrinfo predicts resolve_addr: the same source and
    device as the kernel's resolution."""
    from pyrdmacm import CmId

    info = getaddrinfo("10.0.2.15", "7471")
    assert info.prediction is not None and info.predicted_errno == 0, info.prediction_note
    assert info.dst is not None
    cm_id = CmId(None)
    try:
        cm_id.resolve_addr(info.dst, timeout_ms=2000)
        kernel = cm_id.query_addr()
    finally:
        cm_id.destroy()
    assert kernel.device is not None
    assert (info.prediction.device, info.prediction.src) == (kernel.device.name, kernel.src.ip if kernel.src else None)
    assert getaddrinfo("10.0.2.15", "7471", no_route=True).prediction is None
    assert getaddrinfo(None, "7471", passive=True).prediction is None


def test_listen_binds_what_a_host_and_a_service_name_give() -> None:
    """``pyrdmacm listen localhost:x11``: the kernel's bound address (LISTENING's addr is what
    QUERY ADDR answers) is /etc/hosts' address for localhost and the services database's port
    for x11; the name and what it gave are in the record."""
    import os
    import signal
    import sys

    name = "localhost"
    want_ip = str(socket.getaddrinfo(name, None, socket.AF_UNSPEC, socket.SOCK_STREAM)[0][4][0])
    port = socket.getservbyname("x11", "tcp")
    proc = subprocess.Popen([sys.executable, "-m", "pyrdmacm", "listen", "--json", "%s:x11" % name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        record = json.loads(line)
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=60)
        code = proc.returncode
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert record["event"] == "LISTENING", record
    shown = "[%s]:%d" % (want_ip, port) if ":" in want_ip else "%s:%d" % (want_ip, port)
    assert record["addr"] == shown, record
    assert len(record["names"]) == 1 and record["names"][0].startswith("%s is %s" % (name, want_ip)), record
    assert code == 0, "listen exited %s after SIGTERM:\n%s%s" % (code, rest, err)
