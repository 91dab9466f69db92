"""Every route a device buffer can take through adaptcoll, on fake device memory, under the MPI guard.

Run by tests/test_device_routes.py as `mpiexec -n N -genv LD_PRELOAD=<guard> python -m mpi4py
device_routes.py` with ADAPTCOLL_CUDA_AWARE=0 (the rule: the guard must see no device pointer) and =1
(the control: native routes then hand MPI device pointers, and the guard must see them). Each case
runs one call through an adaptcoll communicator, checks the result against native MPI on host copies
of the same data, and checks how stats() counted it (served, or native with the expected reason,
"native (staged): ..." when MPI is not CUDA-aware). Each rank writes rank<r>.json into
$DEVICE_ROUTES_OUT: the guard's counts and the route of every case.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fake_device, device_guard

import fake_device as fd

fd.install(seed=int(os.environ.get("PMI_RANK", "0")))

import numpy as np  # noqa: E402
from device_guard import Guard  # noqa: E402
from mpi4py import MPI  # noqa: E402

import adaptcoll  # noqa: E402
from adaptcoll.decision import decide  # noqa: E402
from adaptcoll.forms import pickled  # noqa: E402

guard = Guard()
guard.watch(fd.ARENA.lo, fd.ARENA.hi)

AWARE = os.environ["ADAPTCOLL_CUDA_AWARE"] == "1"
STAGED = "native (staged): "
world = MPI.COMM_WORLD
comm = adaptcoll.Intracomm(world)
rank, size = world.Get_rank(), world.Get_size()
ROUTES: dict[str, str] = {}
SMALL = dict(  # device threshold 16K, small segments: 1 KiB messages are staged, 64 KiB ones served
    device_native_below="16K", bcast_segment_size="4K", reduce_segment_size="4K", allreduce_segment_size="4K"
)


def data(n: int, dtype: str = "f4", salt: int = 0, who: int | None = None) -> np.ndarray:
    """Small integers (exact sums in every dtype), different per rank."""
    rng = np.random.default_rng(1000 * salt + (rank if who is None else who))
    return rng.integers(-3, 4, n).astype(dtype)


def counts(name: str) -> dict:
    row = adaptcoll.stats().get(name, {"adaptcoll": 0, "native": 0, "native_reasons": {}})
    return {"adaptcoll": row["adaptcoll"], "reasons": dict(row["native_reasons"])}


def case(label: str, name: str, expect: str, run) -> None:
    """Run one case; `expect` is "served" or the native reason it must be counted under."""
    before = counts(name)
    run()
    after = counts(name)
    served = after["adaptcoll"] - before["adaptcoll"]
    new = {k: v - before["reasons"].get(k, 0) for k, v in after["reasons"].items() if v != before["reasons"].get(k, 0)}
    if expect == "served":
        assert served == 1 and not new, (label, served, new)
        ROUTES[label] = "adaptcoll"
        return
    assert served == 0 and list(new.values()) == [1], (label, served, new)
    (reason,) = new
    want = expect if AWARE else STAGED + expect
    assert reason == want, (label, reason, want)
    ROUTES[label] = reason


def error_of(run) -> tuple | None:
    try:
        run()
    except Exception as exc:
        return type(exc).__name__, exc.Get_error_class() if isinstance(exc, MPI.Exception) else None
    return None


# -- blocking collectives: below and above the device threshold, every reduction shape ------------------
def allreduce_case(label: str, n: int, dtype: str, op: MPI.Op, expect: str, kind: str = "cai") -> None:
    host = data(n, dtype, salt=n)
    ref = np.empty_like(host)
    world.Allreduce(host, ref, op)
    make = fd.DLPackBuffer if kind == "dlpack" else fd.CAIBuffer
    send, recv = make(host), make(np.zeros_like(host))
    case(label, "Allreduce", expect, lambda: comm.Allreduce(send, recv, op))
    np.testing.assert_array_equal(recv.get(), ref, err_msg=label)
    np.testing.assert_array_equal(send.get(), host, err_msg=label)  # the input stays as it was


def reduce_case(label: str, n: int, dtype: str, op: MPI.Op, root: int, expect: str, in_place: bool = False) -> None:
    host = data(n, dtype, salt=n + 1)
    ref = np.empty_like(host)
    world.Reduce(host, ref, op, root)
    if in_place and rank == root:
        buf = fd.CAIBuffer(host)
        case(label, "Reduce", expect, lambda: comm.Reduce(MPI.IN_PLACE, buf, op, root))
        np.testing.assert_array_equal(buf.get(), ref, err_msg=label)
        return
    send = fd.CAIBuffer(host)
    recv = fd.CAIBuffer(np.zeros_like(host)) if rank == root else fd.CAIBuffer(np.full(n, 7, dtype))
    case(label, "Reduce", expect, lambda: comm.Reduce(send, recv, op, root))
    if rank == root:
        np.testing.assert_array_equal(recv.get(), ref, err_msg=label)
    else:  # a non-root's recvbuf is not touched
        np.testing.assert_array_equal(recv.get(), np.full(n, 7, dtype), err_msg=label)


def bcast_case(label: str, n: int, root: int, expect: str, kind: str = "cai") -> None:
    ref = data(n, "u1", salt=n + 2, who=root)
    make = fd.DLPackBuffer if kind == "dlpack" else fd.CAIBuffer
    buf = make(ref if rank == root else np.zeros(n, "u1"))
    case(label, "Bcast", expect, lambda: comm.Bcast(buf, root))
    np.testing.assert_array_equal(buf.get(), ref, err_msg=label)


def blocking_cases() -> None:
    last = size - 1
    with adaptcoll.configured(**SMALL):
        for n_bytes, expect in ((1024, "below native_below"), (64 << 10, "served")):
            for dtype, op in (("f4", MPI.SUM), ("i8", MPI.MAX), ("f8", MPI.PROD)):
                n = n_bytes // np.dtype(dtype).itemsize
                allreduce_case(f"Allreduce {n_bytes}B {dtype}", n, dtype, op, expect)
                reduce_case(f"Reduce {n_bytes}B {dtype} root={last}", n, dtype, op, last, expect)
            bcast_case(f"Bcast {n_bytes}B", n_bytes, last, expect)
            allreduce_case(f"Allreduce {n_bytes}B dlpack", n_bytes // 4, "f4", MPI.SUM, expect, kind="dlpack")
            bcast_case(f"Bcast {n_bytes}B dlpack", n_bytes, 0, expect, kind="dlpack")
            reduce_case(f"Reduce {n_bytes}B in place", n_bytes // 8, "f8", MPI.SUM, 0, expect, in_place=True)
            # Allreduce in place, as IN_PLACE and as sendbuf is recvbuf
            for spelled in ("IN_PLACE", "same object"):
                host = data(n_bytes // 4, "f4", salt=5)
                ref = np.empty_like(host)
                world.Allreduce(host, ref, MPI.SUM)
                buf = fd.CAIBuffer(host)
                send = MPI.IN_PLACE if spelled == "IN_PLACE" else buf
                case(f"Allreduce {n_bytes}B {spelled}", "Allreduce", expect, lambda s=send, b=buf: comm.Allreduce(s, b))
                np.testing.assert_array_equal(buf.get(), ref)
    # the shipped defaults (device_native_below 4M): the H100 segmentation fault was 1 MiB float32 Allreduce
    allreduce_case("Allreduce 4MiB f4 shipped defaults", 1 << 20, "f4", MPI.SUM, "served")
    allreduce_case("Allreduce 1MiB f4 shipped defaults", 1 << 18, "f4", MPI.SUM, "below native_below")


# -- the fast path for small CuPy arrays (adaptcoll.device.small) ---------------------------------------
def small_array_cases() -> None:
    """Exact cupy.ndarrays (the stand-in's) below the device threshold: without CUDA-aware MPI they skip
    the decision (none is asked for) and run the staged native call; results against native MPI on host
    copies, every root, in place where MPI allows it, a non-default producer stream."""
    cupy = sys.modules["cupy"]
    decided: list[str] = []
    real = {name: getattr(decide, name) for name in ("bcast", "reduce", "allreduce")}
    for name, fn in real.items():
        setattr(decide, name, lambda *a, _fn=fn, _name=name, **k: decided.append(_name) or _fn(*a, **k))
    calls = 0
    expect = "below native_below"
    try:
        with adaptcoll.configured(**SMALL):
            warm = fd.device_array(data(16, "f4"))
            comm.Allreduce(MPI.IN_PLACE, warm)  # decided (staged: enables the fast path without CUDA-aware MPI)
            decided.clear()
            n = 256
            for root in range(size):
                ref = data(n * 4, "u1", salt=40, who=root)
                buf = fd.device_array(ref if rank == root else np.zeros(n * 4, "u1"))
                case(f"small Bcast root={root}", "Bcast", expect, lambda b=buf, r=root: comm.Bcast(b, r))
                np.testing.assert_array_equal(buf.get(), ref)
                calls += 1
                for dtype, op in (("f4", MPI.SUM), ("i8", MPI.MAX)):
                    host = data(n, dtype, salt=41)
                    ref = np.empty_like(host)
                    world.Reduce(host, ref, op, root)
                    send = fd.device_array(host)
                    recv = fd.device_array(np.zeros_like(host) if rank == root else np.full(n, 7, dtype))
                    other = recv if rank == root or dtype == "f4" else None  # a non-root may pass None
                    label = f"small Reduce {dtype} root={root}"
                    case(label, "Reduce", expect, lambda s=send, o=other, op=op, r=root: comm.Reduce(s, o, op, r))
                    want = ref if rank == root else np.full(n, 7, dtype)
                    np.testing.assert_array_equal(recv.get(), want, err_msg=label)
                    np.testing.assert_array_equal(send.get(), host, err_msg=label)
                    calls += 1
                for spelled in ("IN_PLACE", "same object"):
                    host = data(n, "f8", salt=42)
                    ref = np.empty_like(host)
                    world.Reduce(host, ref, MPI.SUM, root)
                    buf = fd.device_array(host)
                    send = buf if spelled == "same object" or rank != root else MPI.IN_PLACE
                    label = f"small Reduce in place ({spelled}) root={root}"
                    case(label, "Reduce", expect, lambda s=send, b=buf, r=root: comm.Reduce(s, b, MPI.SUM, r))
                    np.testing.assert_array_equal(buf.get(), ref if rank == root else host, err_msg=label)
                    calls += 1
            for spelled in ("separate", "IN_PLACE", "same object"):
                host = data(n, "i4", salt=43)
                ref = np.empty_like(host)
                world.Allreduce(host, ref, MPI.SUM)
                with cupy.cuda.Stream(non_blocking=True) as producer:  # the producer's stream is waited for
                    send = fd.device_array(host)
                    recv = send if spelled != "separate" else fd.device_array(np.zeros_like(host))
                    first = {"separate": send, "IN_PLACE": MPI.IN_PLACE, "same object": send}[spelled]
                    before = len(cupy.cuda.runtime.synchronized)
                    case(
                        f"small Allreduce {spelled}", "Allreduce", expect, lambda f=first, r=recv: comm.Allreduce(f, r)
                    )
                    waited = cupy.cuda.runtime.synchronized[before:]
                    assert AWARE or waited == [producer.ptr] * 2, (spelled, waited)  # after copy in, after copy back
                np.testing.assert_array_equal(recv.get(), ref, err_msg=spelled)
                calls += 1
            # the nonblocking forms: the decision's StagedCall, started without the decision
            for root in range(size):
                small_requests(root, n, expect)
                calls += 3
            # a receiver's copy back runs on its producer's stream and is waited for before Bcast returns
            with cupy.cuda.Stream(non_blocking=True) as producer:
                ref = data(n, "u1", salt=44, who=0)
                buf = fd.device_array(ref if rank == 0 else np.zeros(n, "u1"))
                before = len(cupy.cuda.runtime.synchronized)
                case("small Bcast on a producer stream", "Bcast", expect, lambda: comm.Bcast(buf, 0))
                assert AWARE or cupy.cuda.runtime.synchronized[before:] == [producer.ptr]
                np.testing.assert_array_equal(buf.get(), ref)
                calls += 1
    finally:
        for name, fn in real.items():
            setattr(decide, name, fn)
    # not CUDA-aware: no call was decided; CUDA-aware: the fast path is off, every call is decided (native)
    assert len(decided) == (calls if AWARE else 0), (len(decided), calls)
    ROUTES["small arrays decided"] = str(len(decided))


def small_requests(root: int, n: int, expect: str) -> None:
    """Iallreduce, Ireduce and Ibcast on small exact cupy.ndarrays (root `root`), against native MPI."""
    host = data(n, "f4", salt=45)
    ref_all, ref_red = np.empty_like(host), np.empty_like(host)
    world.Allreduce(host, ref_all, MPI.SUM)
    world.Reduce(host, ref_red, MPI.SUM, root)
    bref = data(n, "u1", salt=46, who=root)
    send, recv, red = fd.device_array(host), fd.device_array(host * 0), fd.device_array(host * 0)
    bbuf = fd.device_array(bref if rank == root else np.zeros(n, "u1"))
    mine = red if rank == root else None
    requests: list = []
    case(f"small Iallreduce root={root}", "Iallreduce", expect, lambda: requests.append(comm.Iallreduce(send, recv)))
    case(
        f"small Ireduce root={root}",
        "Ireduce",
        expect,
        lambda: requests.append(comm.Ireduce(send, mine, MPI.SUM, root)),
    )
    case(f"small Ibcast root={root}", "Ibcast", expect, lambda: requests.append(comm.Ibcast(bbuf, root)))
    adaptcoll.Request.Waitall(requests)
    np.testing.assert_array_equal(recv.get(), ref_all)
    np.testing.assert_array_equal(red.get(), ref_red if rank == root else host * 0)
    np.testing.assert_array_equal(bbuf.get(), bref)


# -- what adaptcoll does not serve: specifications, derived types, MINLOC, algorithm=native, odd ops -----
def unserved_cases() -> None:
    n = 4096
    with adaptcoll.configured(**SMALL):
        host = data(n, "f4", salt=9)
        ref = np.empty_like(host)
        world.Allreduce(host, ref, MPI.SUM)
        send, recv = fd.CAIBuffer(host), fd.CAIBuffer(np.zeros(n, "f4"))
        # specifications are read by type signature, as on the host: served like the plain buffer
        case(
            "Allreduce [buf, FLOAT]",
            "Allreduce",
            "served",
            lambda: comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT]),
        )
        np.testing.assert_array_equal(recv.get(), ref)
        # a count smaller than the buffer: the tail stays as it was
        tail = fd.CAIBuffer(np.full(n, 5, "f4"))
        half = n // 2
        case("Bcast (buf, n/2, FLOAT)", "Bcast", "below native_below", lambda: comm.Bcast((tail, half, MPI.FLOAT), 0))
        want = np.full(n, 5, "f4")
        np.testing.assert_array_equal(tail.get(), want)
        # the same message in different legal forms on different ranks: every rank decides alike (served)
        contiguous = MPI.FLOAT.Create_contiguous(n).Commit()
        mixed = fd.CAIBuffer(host.copy() if rank == 0 else np.zeros(n, "f4"))
        form = mixed if rank == 0 else [mixed, 1, contiguous]
        case("Bcast plain vs [buf, 1, contiguous(n)]", "Bcast", "served", lambda: comm.Bcast(form, 0))
        np.testing.assert_array_equal(mixed.get(), world.bcast(host if rank == 0 else None, 0))
        contiguous.Free()
        # a derived datatype with holes: receivers keep their own values in the holes
        vector = MPI.FLOAT.Create_vector(half, 1, 2).Commit()
        mine = data(n, "f4", salt=11)
        root_data = data(n, "f4", salt=11, who=1 % size)
        buf = fd.CAIBuffer(mine)
        holes = "device memory with a non-contiguous datatype"
        case("Bcast (buf, 1, vector)", "Bcast", holes, lambda: comm.Bcast((buf, 1, vector), 1 % size))
        expected = mine.copy()
        expected[::2] = root_data[::2]
        np.testing.assert_array_equal(buf.get(), expected)
        vector.Free()
        spec = "datatype not served"
        # MINLOC / MAXLOC on FLOAT_INT pairs
        pair = np.dtype([("v", "f4"), ("i", "i4")])
        for op_name, op in (("MINLOC", MPI.MINLOC), ("MAXLOC", MPI.MAXLOC)):
            values = np.zeros(64, pair)
            values["v"], values["i"] = data(64, "f4", salt=12), rank
            ref_pairs = np.zeros_like(values)
            world.Allreduce([values, MPI.FLOAT_INT], [ref_pairs, MPI.FLOAT_INT], op)
            dev, out = fd.CAIBuffer(values), fd.CAIBuffer(np.zeros_like(values))
            case(
                f"Allreduce {op_name}",
                "Allreduce",
                spec,
                lambda d=dev, o=out, op=op: comm.Allreduce([d, MPI.FLOAT_INT], [o, MPI.FLOAT_INT], op),
            )
            assert out.get().tobytes() == ref_pairs.tobytes(), op_name
        # a non-commutative user op with root != 0
        noncommutative = MPI.Op.Create(_left_biased, commute=False)
        host = data(2048, "f8", salt=13)
        ref = np.empty_like(host)
        last = size - 1
        world.Reduce(host, ref, noncommutative, last)
        send, recv = fd.CAIBuffer(host), fd.CAIBuffer(np.zeros_like(host))
        why = "non-commutative op with root != 0" if size > 1 else "served"
        case("Reduce non-commutative root=last", "Reduce", why, lambda: comm.Reduce(send, recv, noncommutative, last))
        if rank == last:
            np.testing.assert_array_equal(recv.get(), ref)
        noncommutative.Free()
    # algorithm=native, for sizes adaptcoll would otherwise serve
    native = dict(SMALL, bcast_algorithm="native", reduce_algorithm="native", allreduce_algorithm="native")
    with adaptcoll.configured(**native):
        allreduce_case("Allreduce algorithm=native", 16384, "f4", MPI.SUM, "algorithm=native")
        reduce_case("Reduce algorithm=native", 16384, "f4", MPI.SUM, 0, "algorithm=native")
        bcast_case("Bcast algorithm=native", 65536, 0, "algorithm=native")


def _left_biased(inbuf, inoutbuf, datatype) -> None:  # inout = in + 2 * inout: not commutative
    a = np.frombuffer(inbuf, np.float64)
    b = np.frombuffer(inoutbuf, np.float64)
    b[:] = a + 2 * b


# -- errors: the same error as native MPI gives for the same arguments on host buffers --------------------
def error_cases() -> None:
    with adaptcoll.configured(**SMALL):
        host = np.zeros(256, "f4")
        dev = fd.CAIBuffer(host)
        for label, native_call, ours in (
            ("Bcast root out of range", lambda: world.Bcast(host.copy(), size), lambda: comm.Bcast(dev, size)),
            ("Bcast root None", lambda: world.Bcast(host.copy(), None), lambda: comm.Bcast(dev, None)),
            (
                "Allreduce non-contiguous",
                lambda: world.Allreduce(np.zeros(512, "f4")[::2], host.copy()),
                lambda: comm.Allreduce(fd.Strided(np.zeros(512, "f4")), fd.CAIBuffer(host)),
            ),
        ):
            want = error_of(native_call)
            assert want is not None, label
            got = error_of(ours)
            assert got == want, (label, got, want)
            ROUTES[label] = f"error {got[0]}"


# -- nonblocking and persistent forms ------------------------------------------------------------------
def request_cases() -> None:
    with adaptcoll.configured(**SMALL):
        for n_bytes, expect in ((1024, "below native_below"), (64 << 10, "served")):
            request_case(n_bytes, expect)
    with adaptcoll.configured(**dict(SMALL, allreduce_algorithm="native")):
        host = data(16384, "f4", salt=22)
        ref = np.empty_like(host)
        world.Allreduce(host, ref, MPI.SUM)
        send, recv = fd.CAIBuffer(host), fd.CAIBuffer(np.zeros_like(host))
        requests = []
        case(
            "Iallreduce algorithm=native",
            "Iallreduce",
            "algorithm=native",
            lambda: requests.append(comm.Iallreduce(send, recv)),
        )
        requests[0].Wait()
        np.testing.assert_array_equal(recv.get(), ref)


def request_case(n_bytes: int, expect: str) -> None:
    """Nonblocking and persistent forms of the three collectives at one size."""
    n = n_bytes // 4
    host = data(n, "f4", salt=20)
    ref_all, ref_red = np.empty_like(host), np.empty_like(host)
    world.Allreduce(host, ref_all, MPI.SUM)
    world.Reduce(host, ref_red, MPI.SUM, 0)
    root_data = data(n_bytes, "u1", salt=21, who=0)
    send, recv, red = fd.CAIBuffer(host), fd.CAIBuffer(np.zeros(n, "f4")), fd.CAIBuffer(np.zeros(n, "f4"))
    bbuf = fd.CAIBuffer(root_data if rank == 0 else np.zeros(n_bytes, "u1"))
    requests = []
    case(f"Iallreduce {n_bytes}B", "Iallreduce", expect, lambda: requests.append(comm.Iallreduce(send, recv)))
    case(f"Ireduce {n_bytes}B", "Ireduce", expect, lambda: requests.append(comm.Ireduce(send, red, MPI.SUM, 0)))
    case(f"Ibcast {n_bytes}B", "Ibcast", expect, lambda: requests.append(comm.Ibcast(bbuf, 0)))
    adaptcoll.Request.Waitall(requests)
    np.testing.assert_array_equal(recv.get(), ref_all)
    if rank == 0:
        np.testing.assert_array_equal(red.get(), ref_red)
    np.testing.assert_array_equal(bbuf.get(), root_data)
    # persistent: set up once, started twice with new data in between
    send, recv = fd.CAIBuffer(host), fd.CAIBuffer(np.zeros(n, "f4"))
    bbuf = fd.CAIBuffer(np.zeros(n_bytes, "u1"))
    made = []
    case(f"Allreduce_init {n_bytes}B", "Allreduce_init", expect, lambda: made.append(comm.Allreduce_init(send, recv)))
    case(f"Bcast_init {n_bytes}B", "Bcast_init", expect, lambda: made.append(comm.Bcast_init(bbuf, 0)))
    case(
        f"Reduce_init {n_bytes}B",
        "Reduce_init",
        expect,
        lambda: made.append(comm.Reduce_init(send, red, MPI.SUM, 0)),
    )
    for scale in (1, 3):
        send.set(host * scale)
        if rank == 0:
            bbuf.set(root_data // scale)
        adaptcoll.Prequest.Startall(made)
        adaptcoll.Request.Waitall(made)
        np.testing.assert_array_equal(recv.get(), ref_all * scale)
        np.testing.assert_array_equal(bbuf.get(), root_data // scale)
        if rank == 0:
            np.testing.assert_array_equal(red.get(), ref_red * scale)
    for request in made:
        request.Free()


# -- pickle-based collectives with device memory inside the objects -------------------------------------
def pickled_cases() -> None:
    big = np.arange(40_000, dtype=np.float64) + 1  # 320 KB: the out-of-band route (above the inline size)
    small = np.arange(10, dtype=np.float64)
    assert big.nbytes > pickled.INLINE_BELOW
    for label, obj in (
        ("bcast managed memory (out-of-band)", {"m": fd.ManagedArray.of(big), "tag": "x"}),
        ("bcast managed memory (inline)", {"m": fd.ManagedArray.of(small)}),
        ("bcast CAI object", {"c": fd.CAIBuffer(big)}),
    ):
        got = comm.bcast(obj if rank == 0 else None, 0)
        value = next(v for k, v in got.items() if k != "tag")
        host = value.get() if isinstance(value, fd.CAIBuffer) else np.asarray(value)
        np.testing.assert_array_equal(host, big if host.size == big.size else small, err_msg=label)
        ROUTES[label] = "checked"
    mine = fd.ManagedArray.of(big * (rank + 1))
    total = comm.allreduce(mine, op=MPI.SUM)
    np.testing.assert_array_equal(np.asarray(total), big * sum(range(1, size + 1)))
    got = comm.reduce(mine, op=MPI.SUM, root=size - 1)
    if rank == size - 1:
        np.testing.assert_array_equal(np.asarray(got), big * sum(range(1, size + 1)))
    ROUTES["allreduce/reduce managed memory"] = "checked"
    with adaptcoll.configured(bcast_algorithm="native", allreduce_algorithm="native"):
        got = comm.bcast({"m": fd.ManagedArray.of(big)} if rank == 0 else None, 0)
        np.testing.assert_array_equal(np.asarray(got["m"]), big)
        np.testing.assert_array_equal(np.asarray(comm.allreduce(mine, op=MPI.SUM)), big * sum(range(1, size + 1)))
    ROUTES["pickled algorithm=native"] = "checked"


def main() -> None:
    blocking_cases()
    small_array_cases()
    unserved_cases()
    error_cases()
    request_cases()
    pickled_cases()
    world.Barrier()
    hits, calls, checked = guard.hits, guard.calls, guard.checked
    # control: a device pointer handed to MPI directly must be seen
    before = guard.hits
    MPI.Intracomm.Bcast(world, fd.CAIBuffer(np.zeros(8, "f4")), 0)
    control = guard.hits - before
    report = {
        "rank": rank,
        "aware": AWARE,
        "hits": hits,
        "calls": calls,
        "checked": checked,
        "control_hits": control,
        "routes": ROUTES,
    }
    Path(os.environ["DEVICE_ROUTES_OUT"], f"rank{rank}.json").write_text(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
