"""The network changing under an established connection between the lab's two guests (#39
item 3): lab-b's neighbour entry for lab-a's address gets another hardware address.

The same change under ids of one host is tests/kernel/test_netevent_lab.py; an established
connection needs a peer whose address has a neighbour entry here, hence the pair topology
(rxe does not carry a connection into another network namespace before 7.x: seen on 6.1 and
6.12, where a REQ from the root namespace to a listener in another got no answer).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pair_races import PeerScript, connect_all  # noqa: E402
from pyrdmacm import EventChannel, kernel_rules  # noqa: E402

pytestmark = pytest.mark.kernel(topology="pair")

#: lab-a accepts one connection, says so, and on the test's order watches its events for a
#: while and reports them
ACCEPTING_PEER = r'''
port = int(sys.argv[1])
ch = EventChannel()
lst = CmId(ch)
lst.bind_addr("10.9.0.1:%d" % port)
lst.listen()
answer(listening=port)
ids = accept_all(ch, 1)
answer(established=len(ids))
watch = order()["watch"]
seen, end = [], time.monotonic() + watch
while time.monotonic() < end:
    for ev in ch.get_events(8, 0.2, ack=True):
        seen.append([ev.event.name, ev.status])
answer(seen=seen)
order()
'''


def _kernel():
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int(minor)


def _neighbour(address: str):
    """(netdev, hardware address) of ``address``'s neighbour entry here."""
    words = subprocess.run(["ip", "neigh", "show", address], capture_output=True, text=True).stdout.split()
    assert "dev" in words and "lladdr" in words, "no neighbour entry for %s: %s" % (address, words)
    return words[words.index("dev") + 1], words[words.index("lladdr") + 1]


def test_an_established_connection_hears_of_its_neighbours_new_address(peer):
    """lab-b connects to lab-a and both ends reach ESTABLISHED; then lab-b's neighbour entry
    for lab-a gets another hardware address.  From 6.0 lab-b's id gets UNREACHABLE -ETIMEDOUT
    at once (kernel_rules.NET_CHANGES), on 5.10 nothing; lab-a, whose neighbour did not
    change, hears nothing either way.  The ids are destroyed promptly after, the kernel log
    clean."""
    from pyrdmacm.conformance import KernelLog

    log = KernelLog()
    rule = kernel_rules.net_change("neighbour", _kernel())
    port = 7601
    script = PeerScript(peer, ACCEPTING_PEER, port)
    assert script.answer() == {"listening": port}
    with EventChannel() as ch:
        (cm,) = connect_all(ch, "%s:%d" % (peer.address, port), range(1)).values()
        assert script.answer() == {"established": 1}
        dev, original = _neighbour(peer.address)
        subprocess.run(["ip", "neigh", "replace", peer.address, "lladdr", "02:00:00:00:00:99", "dev", dev,
                        "nud", "permanent"], check=True)
        try:
            seen = []
            end = time.monotonic() + 3
            while time.monotonic() < end:
                seen += [(ev.id is cm, ev.event, ev.status) for ev in ch.get_events(8, 0.2, ack=True)]
        finally:
            subprocess.run(["ip", "neigh", "replace", peer.address, "lladdr", original, "dev", dev, "nud", "reachable"],
                           check=True)
        script.send(watch=1.0)
        far = script.answer()["seen"]
        print("%s: established, then the neighbour changed: here %s, on lab-a %s" % (_kernel(), seen, far))
        assert seen == ([] if rule is None else [(True, rule.event, rule.status)]), seen
        assert far == [], far
        gone = threading.Event()
        threading.Thread(target=lambda: (cm.destroy(), gone.set()), daemon=True).start()
        assert gone.wait(20), "DESTROY_ID hung"
    script.send(done=True)
    script.close()
    assert log.new_problems() == []
