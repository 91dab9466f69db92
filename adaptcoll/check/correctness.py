"""The correctness part of the check: every case of `cases` run by adaptcoll and compared with native
MPI's result on the same inputs, on every rank; the outcome of each case is agreed by all ranks (one
small allgather per case), so every rank reports the same failures and nobody waits on a rank that
raised."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..measure import route_of
from .cases import BLOCK_COLLECTIVES, MULTI, Case, group_inputs, inputs

__all__ = ["CaseResult", "run_cases", "Runner"]


@dataclass
class CaseResult:
    """A case's agreed outcome: passed everywhere, or the first rank's problem; `routes`: how adaptcoll
    ran it on rank 0 ('adaptcoll', 'native: <reason>', 'native (staged)', ...)."""

    case: Case
    passed: bool
    route: str
    problem: Optional[str] = None
    ranks_failing: list[int] = field(default_factory=list)
    device: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.describe(),
            "collective": self.case.collective,
            "form": self.case.form,
            "route_asked": self.case.route.label,
            "route": self.route,
            "dtype": self.case.dtype,
            "op": self.case.op,
            "count": self.case.count,
            "root": self.case.root,
            "device": self.device,
            "passed": self.passed,
            "problem": self.problem,
            "ranks_failing": self.ranks_failing,
        }


def _fill(count: int, dtype: np.dtype) -> np.ndarray:
    """A receive buffer nothing could produce: NaN for floats, a marker for integers."""
    if dtype.kind in "fc":
        return np.full(count, np.nan, dtype=dtype)
    return np.full(count, 0x5A, dtype=dtype)


class Runner:
    """Runs cases on one adaptcoll communicator (host arrays, or CuPy arrays with `cupy`) against native
    MPI on `world`; native results are computed once per distinct input."""

    def __init__(self, world: Any, comm: Any, MPI: Any, adaptcoll: Any, cupy: Any = None) -> None:
        self.world, self.comm, self.MPI, self.adaptcoll, self.cupy = world, comm, MPI, adaptcoll, cupy
        self.rank = world.Get_rank()
        self._expected: dict[tuple[Any, ...], Any] = {}

    # -- native reference ----------------------------------------------------------------------

    def expected(self, case: Case) -> Any:
        """Native MPI's result of the case on this rank (None where MPI defines none: Reduce non-roots)."""
        key = (case.collective, case.dtype, case.op, case.count, case.root, case.form == "pickle")
        if key not in self._expected:
            self._expected[key] = self._native(case)
        return self._expected[key]

    def _native(self, case: Case) -> Any:
        world, MPI = self.world, self.MPI
        op = getattr(MPI, case.op)
        if case.collective == MULTI:  # one native Allreduce per array
            outs = []
            for mine in group_inputs(case, self.rank):
                out = _fill(mine.size, mine.dtype)
                world.Allreduce(mine, out, op)
                outs.append(out)
            return outs
        if case.collective in BLOCK_COLLECTIVES:
            send = _block_input(case, self.rank, world.Get_size())
            if case.collective == "Allgather":
                out = _fill(case.count * world.Get_size(), send.dtype)
                world.Allgather(send, out)
            else:
                out = _fill(case.count, send.dtype)
                world.Reduce_scatter_block(send, out, op)
            return out
        mine = inputs(case, self.rank)
        if case.form == "pickle":
            if case.collective == "Bcast":
                return world.bcast(mine, case.root)
            if case.collective == "Reduce":
                return world.reduce(mine, op, case.root)
            return world.allreduce(mine, op)
        if case.collective == "Bcast":
            world.Bcast(mine, case.root)
            return mine
        out = _fill(case.count, mine.dtype)
        if case.collective == "Reduce":
            world.Reduce(mine, out, op, case.root)
            return out if self.rank == case.root else None
        world.Allreduce(mine, out, op)
        return out

    # -- adaptcoll -----------------------------------------------------------------------------

    def _array(self, host: np.ndarray) -> Any:
        return host if self.cupy is None else self.cupy.asarray(host)

    def _host(self, arr: Any) -> np.ndarray:
        return arr if self.cupy is None else self.cupy.asnumpy(arr)

    def _blocks(self, case: Case) -> Any:
        """Allgather / Reduce_scatter_block (host memory), in the case's form."""
        comm, MPI = self.comm, self.MPI
        op = getattr(MPI, case.op)
        rank, p = self.rank, self.world.Get_size()
        send = _block_input(case, rank, p)
        n = case.count
        if case.collective == "Allgather":
            out = _fill(n * p, send.dtype)
            if case.form == "in_place":
                out[rank * n : (rank + 1) * n] = send
                comm.Allgather(MPI.IN_PLACE, out)
            elif case.form == "nonblocking":
                comm.Iallgather(send, out).Wait()
            else:
                comm.Allgather(send, out)
            return out
        if case.form == "in_place":
            comm.Reduce_scatter_block(MPI.IN_PLACE, send, op)
            return send[:n]
        out = _fill(n, send.dtype)
        if case.form == "nonblocking":
            comm.Ireduce_scatter_block(send, out, op).Wait()
        else:
            comm.Reduce_scatter_block(send, out, op)
        return out

    def _multi(self, case: Case) -> list[np.ndarray]:
        """The grouped Allreduce (host or device arrays) in the case's form: Allreduce_multi, with
        MPI.IN_PLACE, Iallreduce_multi (each array's request waited for, last first, then the group's),
        or Allreduce_multi_init started twice (the receive arrays refilled in between)."""
        comm, MPI = self.comm, self.MPI
        op = getattr(MPI, case.op)
        sends = [self._array(a) for a in group_inputs(case, self.rank)]
        if case.form == "in_place":
            comm.Allreduce_multi(MPI.IN_PLACE, sends, op)
            return [self._host(a) for a in sends]
        recvs = [self._array(_fill(a.size, a.dtype)) for a in sends]

        def nonblocking() -> Any:
            req = comm.Iallreduce_multi(sends, recvs, op)
            self.adaptcoll.Request.Waitall(req.requests[::-1])
            return req

        def refill() -> None:
            for r in recvs:
                r[...] = self._array(_fill(r.size, np.dtype(r.dtype)))

        self._run(
            case,
            lambda: comm.Allreduce_multi(sends, recvs, op),
            nonblocking,
            lambda: comm.Allreduce_multi_init(sends, recvs, op),
            refill,
        )
        return [self._host(r) for r in recvs]

    def _adaptcoll(self, case: Case) -> Any:
        comm, MPI = self.comm, self.MPI
        if case.collective == MULTI:
            return self._multi(case)
        if case.collective in BLOCK_COLLECTIVES:
            return self._blocks(case)
        op = getattr(MPI, case.op)
        root, rank = case.root, self.rank
        mine = inputs(case, rank)
        if case.form == "pickle":
            if case.collective == "Bcast":
                return comm.bcast(mine, root)
            if case.collective == "Reduce":
                return comm.reduce(mine, op, root)
            return comm.allreduce(mine, op)
        buf = self._array(mine)
        if case.collective == "Bcast":
            self._run(
                case,
                lambda: comm.Bcast(buf, root),
                lambda: comm.Ibcast(buf, root),
                lambda: comm.Bcast_init(buf, root),
                lambda: buf.__setitem__(slice(None), self._array(inputs(case, rank))),
            )
            return self._host(buf)
        out = self._array(_fill(case.count, mine.dtype))
        in_place = case.form == "in_place"
        if case.collective == "Reduce":
            recv = out if rank == root else None
            send: Any = buf
            if in_place and rank == root:
                send, recv = MPI.IN_PLACE, buf
            self._run(
                case,
                lambda: comm.Reduce(send, recv, op, root),
                lambda: comm.Ireduce(send, recv, op, root),
                lambda: comm.Reduce_init(send, recv, op, root),
                None,
            )
            if rank != root:
                return None
            return self._host(buf if in_place else out)
        if in_place:
            comm.Allreduce(MPI.IN_PLACE, buf, op)
            return self._host(buf)
        self._run(
            case,
            lambda: comm.Allreduce(buf, out, op),
            lambda: comm.Iallreduce(buf, out, op),
            lambda: comm.Allreduce_init(buf, out, op),
            None,
        )
        return self._host(out)

    def _run(
        self,
        case: Case,
        blocking: Callable[[], Any],
        nonblocking: Callable[[], Any],
        persistent: Callable[[], Any],
        refill: Optional[Callable[[], Any]],
    ) -> None:
        """The call in the case's form; the persistent form runs twice (the second run on refilled
        inputs must give the same result: plans are reused, tags are not)."""
        if case.form in ("blocking", "in_place"):
            blocking()
        elif case.form == "nonblocking":
            nonblocking().Wait()
        else:
            request = persistent()
            try:
                request.Start()
                request.Wait()
                if refill is not None:
                    refill()
                request.Start()
                request.Wait()
            finally:
                request.Free()

    def run(self, case: Case) -> CaseResult:
        """Run one case everywhere and agree on its outcome (collective)."""
        adaptcoll = self.adaptcoll
        expected = self.expected(case)
        problem: Optional[str] = None
        route = "?"
        try:
            with adaptcoll.configured(**case.route.overrides):
                before = adaptcoll.stats()
                got = self._adaptcoll(case)
                route = route_of(before, adaptcoll.stats())
            problem = _compare(got, expected)
        except Exception as exc:  # reported, agreed below: no rank leaves the others waiting
            problem = f"raised {type(exc).__name__}: {exc}"
        everyone = self.world.allgather(problem)
        failing = [r for r, p in enumerate(everyone) if p is not None]
        first = everyone[failing[0]] if failing else None
        route = self.world.bcast(route, 0)
        return CaseResult(
            case,
            not failing,
            route,
            f"rank {failing[0]}: {first}" if failing else None,
            failing,
            self.cupy is not None,
        )


def _block_input(case: Case, rank: int, size: int) -> np.ndarray:
    """This rank's sendbuf of an Allgather (one block) or Reduce_scatter_block (a block per rank)."""
    if case.collective == "Allgather":
        return inputs(case, rank)
    whole = Case(case.collective, case.form, case.route, case.dtype, case.op, case.count * size, case.root)
    return inputs(whole, rank)


def _compare(got: Any, expected: Any) -> Optional[str]:
    """None if equal (exactly: the inputs make every result exact), else where they differ (a list:
    array by array, the first that differs)."""
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return f"expected {len(expected)} arrays, got {type(got).__name__}"
        for k, (one, want) in enumerate(zip(got, expected)):
            problem = _compare(one, want)
            if problem is not None:
                return f"array {k}: {problem}"
        return None
    if expected is None:
        return None if got is None else f"expected no result, got {type(got).__name__}"
    if got is None:
        return "no result"
    got = np.asarray(got)
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return f"shape/type {got.shape} {got.dtype}, native MPI gives {expected.shape} {expected.dtype}"
    same = (got == expected) | ((got != got) & (expected != expected))
    if bool(same.all()):
        return None
    bad = np.flatnonzero(~same)
    i = int(bad[0])
    where = f"first at {i}: got {got[i]!r}, native {expected[i]!r}"
    return f"{bad.size} of {got.size} elements differ from native MPI, {where}"


def run_cases(
    runner: Runner, cases: Iterable[Case], progress: Callable[[CaseResult], None] = lambda r: None
) -> list[CaseResult]:
    """Run `cases` in order (the same on every rank); `progress` sees each agreed result."""
    out = []
    for case in cases:
        result = runner.run(case)
        out.append(result)
        progress(result)
    return out
