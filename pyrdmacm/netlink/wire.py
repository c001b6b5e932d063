"""Netlink's wire format with the standard library alone: the message header, attributes,
the messages of a datagram, and one request's conversation on a socket.  No decoding of
any family's attributes: :mod:`pyrdmacm.netlink.nldev` and :mod:`pyrdmacm.netlink.route`
give them meaning.

Theory of operation
-------------------
A netlink message is ``struct nlmsghdr`` (length, type, flags, sequence number, port id),
a family header of the family's own (none for RDMA's NLDEV, ``ifinfomsg`` or ``ifaddrmsg``
for the routing family's links and addresses), then attributes: each a length and a type
(the type's two top bits are flags, ``NLA_F_NESTED`` and ``NLA_F_NET_BYTEORDER``), its
payload, padding to 4 bytes.  A ``doit`` request gets one reply (or an ``NLMSG_ERROR``
carrying an errno, 0 for an ACK); a dump gets messages flagged ``NLM_F_MULTI`` over as
many datagrams as it takes, then ``NLMSG_DONE``.

These are the reads a run makes before its first command (the devices, the netdevs and
their addresses), so they are a few struct calls, not pyroute2's import: that is for the
routing decisions (:func:`pyrdmacm.netlink.route.route_get`), asked only when a route must
be predicted or a failure explained.

Numbers are the kernel's (linux/netlink.h).
"""

from __future__ import annotations

import errno as _errno
import socket
import struct
from typing import Any, Iterator, List, Tuple

NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_DUMP = 0x300
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER
#: ``struct nlmsghdr``: length, type, flags, sequence number, port id
HDR = struct.Struct("=IHHII")
#: ``struct nlattr``: length, type
NLA = struct.Struct("=HH")


def open_socket(protocol: int, name: str, timeout: float = 5.0) -> socket.socket:
    """A netlink socket of ``protocol`` in the caller's network namespace, bound, with
    ``timeout``; an OSError names the call that failed as its filename
    (``socket(AF_NETLINK, NAME)`` or ``bind(NAME)``)."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, protocol)
    except OSError as e:
        raise OSError(e.errno, e.strerror, "socket(AF_NETLINK, %s)" % name) from None
    try:
        sock.settimeout(timeout)
        sock.bind((0, 0))
    except OSError as e:
        sock.close()
        raise OSError(e.errno, e.strerror, "bind(%s)" % name) from None
    return sock


def message(mtype: int, flags: int, seq: int, body: bytes) -> bytes:
    """One message: the header, then ``body`` (family header and attributes)."""
    return HDR.pack(HDR.size + len(body), mtype, flags, seq, 0) + body


def attribute(atype: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes."""
    return NLA.pack(NLA.size + len(payload), atype) + payload + b"\0" * (-len(payload) % 4)


def split(data: bytes) -> Iterator[Tuple[int, int, int, bytes]]:
    """The messages of one datagram: (type, flags, seq, the whole message)."""
    off = 0
    while off + HDR.size <= len(data):
        length, mtype, flags, seq, _pid = HDR.unpack_from(data, off)
        if length < HDR.size or off + length > len(data):
            break
        yield mtype, flags, seq, data[off:off + length]
        off += (length + 3) & ~3


def attributes(data: bytes, off: int = 0) -> List[Tuple[int, bytes]]:
    """The attributes from ``off`` to the end of ``data``: (type without its flags, payload),
    in order; a truncated one ends the list."""
    out = []
    end = len(data)
    while off + NLA.size <= end:
        length, atype = NLA.unpack_from(data, off)
        if length < NLA.size or off + length > end:
            break
        out.append((atype & NLA_TYPE_MASK, data[off + NLA.size:off + length]))
        off += (length + 3) & ~3
    return out


def exchange(sock: Any, request: bytes, seq: int, dump: bool) -> List[bytes]:
    """Send ``request`` (sequence number ``seq``) on ``sock`` (``send``/``recv``) and return
    the replies' messages, whole: a ``doit``'s one (none for an ACK), a dump's up to
    ``NLMSG_DONE``; answers to older requests are skipped.  The kernel's error, a socket's
    error or a time-out (ETIMEDOUT) raise OSError with the errno."""
    try:
        sock.send(request)
    except socket.timeout:
        raise OSError(_errno.ETIMEDOUT, "no answer") from None
    replies: List[bytes] = []
    while True:
        try:
            data = sock.recv(1 << 16)
        except socket.timeout:
            raise OSError(_errno.ETIMEDOUT, "no answer") from None
        if not data:
            raise OSError(_errno.EIO, "the socket was closed")
        for mtype, flags, mseq, chunk in split(data):
            if mseq != seq:
                continue  # a late answer to an older request
            if mtype == NLMSG_ERROR:
                (code,) = struct.unpack_from("=i", chunk, HDR.size)
                if code:
                    raise OSError(-code, _errno.errorcode.get(-code, "error %d" % -code))
                return replies  # an ACK
            if mtype == NLMSG_DONE:
                code = struct.unpack_from("=i", chunk, HDR.size)[0] if len(chunk) >= HDR.size + 4 else 0
                if code < 0:
                    raise OSError(-code, _errno.errorcode.get(-code, "error %d" % -code))
                return replies
            replies.append(chunk)
            if not dump and not flags & NLM_F_MULTI:
                return replies
