"""The asyncio adapter's behavioural suite, run twice like tests/cm_behaviour.py: against the
fake kernel on the host (tests/test_cm_fake.py) and against the real rdma_cm in the kernel lab
(tests/kernel/test_cm_kernel.py).  Each importer provides the ``world`` fixture."""

from __future__ import annotations
