"""QpAttr.to_pyverbs() and AhAttr.to_pyverbs(): INIT_QP_ATTR's answer as pyverbs' QPAttr and
AHAttr, read back through pyverbs itself.

pyverbs is rdma-core's binding and not a dependency: the package imports it only inside
those calls.  The conversion is checked with the real pyverbs the system python3 has
(Debian's python3-pyverbs; no device needed to build the attributes), and skipped with the
reason where it has none.  That it moves real QPs and carries data is the lab's test
(tests/kernel/test_pyverbs_qp_lab.py)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyrdmacm import AhAttr, QpAttr, QpAttrMask, UsageError

ROOT = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"


def _ah(**kw: int) -> AhAttr:
    values = dict(flow_label=0, sgid_index=0, hop_limit=0, traffic_class=0, dlid=0, sl=0, src_path_bits=0,
                  static_rate=0, is_global=0, port_num=0)
    values.update(kw)
    dgid = ipaddress.IPv6Address("::ffff:10.9.0.1" if values["is_global"] else "::")
    return AhAttr(dgid=dgid, **values)


def _qp_attr(mask: QpAttrMask, ah: AhAttr, **kw: int) -> QpAttr:
    names = ("qp_state cur_qp_state path_mtu path_mig_state qkey rq_psn sq_psn dest_qp_num qp_access_flags "
             "pkey_index alt_pkey_index en_sqd_async_notify sq_draining max_rd_atomic max_dest_rd_atomic "
             "min_rnr_timer port_num timeout retry_cnt rnr_retry alt_port_num alt_timeout").split()
    values = dict.fromkeys(names, 0)
    values.update(kw)
    return QpAttr(mask=mask, ah_attr=ah, alt_ah_attr=_ah(), **values)


#: an RC id's RTR answer as the lab's 6.1 kernel gave it (cm-notes §1: mask 0x129181), and its RTS
RTR = _qp_attr(QpAttrMask(0x129181), _ah(flow_label=658452, sgid_index=1, hop_limit=64, traffic_class=104,
                                         is_global=1, port_num=1),
               qp_state=2, path_mtu=3, rq_psn=0x5A5A5, dest_qp_num=17, max_dest_rd_atomic=1, min_rnr_timer=12,
               port_num=1)
RTS = _qp_attr(QpAttrMask(0x12E01), _ah(), qp_state=3, sq_psn=0x1234, timeout=19, retry_cnt=7, rnr_retry=7,
               max_rd_atomic=1)
#: what pyverbs' objects are read back as
READ_BACK = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import pickle
attrs = pickle.loads(bytes.fromhex(sys.stdin.read()))
out = []
for a in attrs:
    pv, mask = a.to_pyverbs()
    ah = pv.ah_attr
    out.append({"type": type(pv).__module__ + "." + type(pv).__name__, "mask": mask,
                "fields": {n: getattr(pv, n) for n in a.fields() if n != "ah_attr"},
                "ah": {n: getattr(ah, n) for n in ("dlid", "sl", "src_path_bits", "static_rate", "is_global",
                                                    "port_num")},
                "grh": {"dgid": str(ah.dgid), "flow_label": ah.flow_label, "sgid_index": ah.sgid_index,
                        "hop_limit": ah.hop_limit, "traffic_class": ah.traffic_class} if ah.is_global else None})
print(json.dumps(out))
"""


def _system_pyverbs() -> None:
    if not os.path.exists(SYSTEM_PYTHON) or subprocess.run([SYSTEM_PYTHON, "-c", "import pyverbs.qp"],
                                                           capture_output=True).returncode:
        pytest.skip("%s cannot import pyverbs (Debian: apt-get install python3-pyverbs; tools/setup does)"
                    % SYSTEM_PYTHON)


def test_each_field_the_mask_names_reaches_pyverbs_as_it_is():
    _system_pyverbs()
    import pickle

    proc = subprocess.run([SYSTEM_PYTHON, "-c", READ_BACK, str(ROOT)], input=pickle.dumps([RTR, RTS]).hex(),
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert proc.returncode == 0, proc.stderr
    rtr, rts = json.loads(proc.stdout)
    assert rtr["type"] == rts["type"] == "pyverbs.qp.QPAttr"
    assert (rtr["mask"], rts["mask"]) == (0x129181, 0x12E01)
    assert rtr["fields"] == {"qp_state": 2, "path_mtu": 3, "rq_psn": 0x5A5A5, "dest_qp_num": 17,
                             "max_dest_rd_atomic": 1, "min_rnr_timer": 12}
    assert rtr["ah"] == {"dlid": 0, "sl": 0, "src_path_bits": 0, "static_rate": 0, "is_global": 1, "port_num": 1}
    assert rtr["grh"] == {"dgid": "0000:0000:0000:0000:0000:ffff:0a09:0001", "flow_label": 658452,
                          "sgid_index": 1, "hop_limit": 64, "traffic_class": 104}
    assert rts["fields"] == {"qp_state": 3, "sq_psn": 0x1234, "timeout": 19, "retry_cnt": 7, "rnr_retry": 7,
                             "max_rd_atomic": 1}


def test_without_pyverbs_the_error_says_where_to_get_it(monkeypatch):
    for name in ("pyverbs", "pyverbs.qp", "pyverbs.addr"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of it fails, here as anywhere
    with pytest.raises(UsageError, match="python3-pyverbs"):
        RTR.to_pyverbs()
    with pytest.raises(UsageError, match="python3-pyverbs"):
        RTR.ah_attr.to_pyverbs()


def test_importing_the_package_and_its_records_does_not_import_pyverbs():
    code = ("import sys, pyrdmacm\nfrom pyrdmacm import QpAttr, AhAttr\nRTR = None\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'pyverbs'], 'pyverbs imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr
