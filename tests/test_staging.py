"""Host staging of device segments, exercised without a GPU: a fake stager whose device<->host copies
finish late (seeded) and only then move the bytes, under every protocol on the loopback transport."""

from __future__ import annotations

import itertools
import random

import numpy as np

from adaptcoll.backends.base import ReduceOp
from adaptcoll.backends.deferred import DeferredBackend
from adaptcoll.backends.pool import SegmentPool
from adaptcoll.device.staging import StagingTransport
from adaptcoll.plans import trees
from adaptcoll.plans.segments import plan_segments
from adaptcoll.protocols.allreduce import Allreduce
from adaptcoll.protocols.bcast import Bcast
from adaptcoll.protocols.context import OpContext
from adaptcoll.protocols.reduce import Reduce
from adaptcoll.runtime.loopback import LoopbackWorld


class LateStager:
    """Pinned-buffer pool and asynchronous copies that complete after a random number of polls."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.free: list[np.ndarray] = []
        self.outstanding = 0
        self.copies = 0

    def acquire(self, count, dtype):
        self.outstanding += 1
        return np.full(count, 99, dtype)  # garbage: a copy that is skipped shows up in the result

    def release(self, host):
        self.outstanding -= 1

    def _late(self, dst, src):
        left = [self.rng.randint(1, 4)]
        self.copies += 1

        def poll():
            left[0] -= 1
            if left[0] == 0:
                dst[...] = src
            return left[0] <= 0

        return poll

    def to_host(self, device_array, host=None):
        return host, self._late(host, device_array)

    def to_device(self, host, device_array):
        return self._late(device_array, host)


def test_staged_bcast_reduce_allreduce():
    for size, seed, kind in itertools.product([2, 3, 6], range(3), ["binomial", "pipeline", "two_tree"]):
        world = LoopbackWorld(size, seed)
        stagers = [LateStager(seed * 10 + r) for r in range(size)]
        ts = [StagingTransport(world.transports[r], stagers[r]) for r in range(size)]
        tset = trees.build_all(kind, size, 0)
        n = 50
        plan = plan_segments(n, 8, 32, 0, 1 << 15)
        rng = np.random.default_rng(seed)
        data = [rng.integers(-9, 9, n).astype("i8") for _ in range(size)]
        bc = [data[0].copy() if r == 0 else np.zeros(n, "i8") for r in range(size)]
        red = [np.zeros(n, "i8") for _ in range(size)]
        allr = [np.zeros(n, "i8") for _ in range(size)]
        left = [0]
        be = DeferredBackend(seed=seed)

        def done():
            left[0] -= 1  # noqa: B023 - this iteration's counter, run within it

        for r in range(size):
            pool = SegmentPool(be, np.dtype("i8"))
            for k, t in enumerate(tset):
                segs = range(k, plan.nseg, len(tset))
                args = (t.parent(r), t.children(r))
                left[0] += 3
                ctx = OpContext(ts[r], be, plan, 2, 3, "first", False, pool)
                Bcast(ctx, *args, bc[r], segs, done).start()
                Reduce(
                    ctx.with_plan(plan_segments(n, 8, 32, 1000, 1 << 15)),
                    *args,
                    data[r],
                    red[r] if r == 0 else None,
                    ReduceOp("SUM"),
                    segs,
                    done,
                ).start()
                Allreduce(
                    ctx.with_plan(plan_segments(n, 8, 32, 2000, 1 << 15)),
                    *args,
                    data[r],
                    allr[r],
                    ReduceOp("SUM"),
                    segs,
                    done,
                ).start()
        world.run(lambda: left[0] == 0)  # noqa: B023
        total = np.sum(data, axis=0)
        for r in range(size):
            np.testing.assert_array_equal(bc[r], data[0])
            np.testing.assert_array_equal(allr[r], total)
        np.testing.assert_array_equal(red[0], total)
        assert all(s.outstanding == 0 for s in stagers), "a pinned buffer was never released"
        assert sum(s.copies for s in stagers) > 0
