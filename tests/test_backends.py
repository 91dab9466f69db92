"""Array backends: NumPy folds against an independent per-element reference, MPI's op/type table,
the deferred backend's late completion, and CuPy against NumPy where a GPU is present."""

from __future__ import annotations

import operator
import tracemalloc
import types

import numpy as np
import pytest

from adaptcoll.backends.base import PREDEFINED_OPS, ReduceOp
from adaptcoll.backends.deferred import DeferredBackend, InputModifiedError
from adaptcoll.backends.numpy_backend import UFUNC_BY_OP, NumpyBackend

INT_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOAT_TYPES = ["float16", "float32", "float64"]
COMPLEX_TYPES = ["complex64", "complex128"]
ALL_TYPES = INT_TYPES + FLOAT_TYPES + COMPLEX_TYPES + ["bool"]

# MPI 4.1 section 6.9.2, restricted to the NumPy types we map: which op applies to which type class.
MPI_RULES = {
    "SUM": {"int", "float", "complex"},
    "PROD": {"int", "float", "complex"},
    "MAX": {"int", "float"},
    "MIN": {"int", "float"},
    "LAND": {"int", "bool"},
    "LOR": {"int", "bool"},
    "LXOR": {"int", "bool"},
    "BAND": {"int", "bool"},
    "BOR": {"int", "bool"},
    "BXOR": {"int", "bool"},
}


def type_class(dtype_name: str) -> str:
    """The MPI type class of a NumPy dtype name."""
    if dtype_name in INT_TYPES:
        return "int"
    if dtype_name in FLOAT_TYPES:
        return "float"
    if dtype_name in COMPLEX_TYPES:
        return "complex"
    return "bool"


def op_type_pairs() -> list[tuple[str, str]]:
    """Every (op, dtype) pair MPI defines among our types."""
    return [(op, t) for op in PREDEFINED_OPS for t in ALL_TYPES if type_class(t) in MPI_RULES[op]]


# ---- an independent reference: Python scalars, element by element, wrapped to the dtype ----------

_PY_OPS = {
    "SUM": operator.add,
    "PROD": operator.mul,
    "MAX": max,
    "MIN": min,
    "LAND": lambda a, b: int(bool(a) and bool(b)),
    "LOR": lambda a, b: int(bool(a) or bool(b)),
    "LXOR": lambda a, b: int(bool(a) != bool(b)),
    "BAND": operator.and_,
    "BOR": operator.or_,
    "BXOR": operator.xor,
}


def reference(op: str, lower: np.ndarray, higher: np.ndarray) -> np.ndarray:
    """`lower op higher` computed on Python scalars and then converted (integers wrap modulo 2**bits)."""
    dtype = lower.dtype
    values = [_PY_OPS[op](a, b) for a, b in zip(lower.tolist(), higher.tolist())]
    if dtype.kind in "iu":
        bits = dtype.itemsize * 8
        wrapped = np.array([int(v) % (1 << bits) for v in values], dtype=f"u{dtype.itemsize}")
        return wrapped.view(dtype)
    if dtype.kind == "b":
        return np.array([bool(v) for v in values], dtype=bool)
    return np.array(values, dtype=dtype)


def sample(dtype_name: str, count: int, seed: int) -> np.ndarray:
    """Values that exercise signs, zeros, overflow and (for floats) stay exact under one + or *."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype_name)
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
        values[::7] = 0  # zeros matter for the logical ops
        values[1::11] = 1
        return values
    # Dyadic values with few significant bits: sums and products are exact in every float type,
    # so the Python-double reference rounds the same way as the dtype's own arithmetic.
    real = rng.integers(-64, 65, count) / 8.0
    if dtype.kind == "c":
        imag = rng.integers(-64, 65, count) / 8.0
        return (real + 1j * imag).astype(dtype)
    return real.astype(dtype)


@pytest.fixture(scope="module")
def numpy_backend() -> NumpyBackend:
    return NumpyBackend()


def test_supports_matches_mpi_rules(numpy_backend: NumpyBackend) -> None:
    for op in PREDEFINED_OPS:
        for t in ALL_TYPES:
            expected = type_class(t) in MPI_RULES[op]
            assert numpy_backend.supports(ReduceOp(op), t) is expected, (op, t)
            assert numpy_backend.supports(ReduceOp(op), np.dtype(t)) is expected, (op, t)
    for odd in ["longdouble", "U4", "O", ">f8", "V8", "datetime64[s]"]:
        for op in PREDEFINED_OPS:
            assert numpy_backend.supports(ReduceOp(op), odd) is False, (op, odd)
    assert numpy_backend.supports(ReduceOp("USER", user_fold=lambda a, b: None), "float64")
    assert not numpy_backend.supports(ReduceOp("USER"), "float64")
    assert not numpy_backend.supports(ReduceOp("NOPE"), "float64")


@pytest.mark.parametrize("op,dtype_name", op_type_pairs())
def test_numpy_combine_matches_reference(numpy_backend: NumpyBackend, op: str, dtype_name: str) -> None:
    count = 257
    lower, higher = sample(dtype_name, count, 1), sample(dtype_name, count, 2)
    expected = reference(op, lower, higher)
    reduce_op = ReduceOp(op)
    with np.errstate(over="ignore"):
        # out is a third array, then lower, then higher: the inputs that are not `out` stay intact.
        out = numpy_backend.empty(count, dtype_name)
        assert numpy_backend.combine(reduce_op, lower, higher, out) is None
        np.testing.assert_array_equal(out, expected)
        np.testing.assert_array_equal(lower, sample(dtype_name, count, 1))
        np.testing.assert_array_equal(higher, sample(dtype_name, count, 2))

        a, b = lower.copy(), higher.copy()
        assert numpy_backend.combine(reduce_op, a, b, a) is None
        np.testing.assert_array_equal(a, expected)
        np.testing.assert_array_equal(b, higher)

        a, b = lower.copy(), higher.copy()
        assert numpy_backend.combine(reduce_op, a, b, b) is None
        np.testing.assert_array_equal(b, expected)
        np.testing.assert_array_equal(a, lower)
    assert out.dtype == np.dtype(dtype_name)


def test_logical_ops_on_integers_give_one_and_zero(numpy_backend: NumpyBackend) -> None:
    lower = np.array([0, 5, -3, 0, 7], dtype=np.int32)
    higher = np.array([0, 0, 9, 2, -1], dtype=np.int32)
    cases = {"LAND": [0, 0, 1, 0, 1], "LOR": [0, 1, 1, 1, 1], "LXOR": [0, 1, 0, 1, 0]}
    for op, expected in cases.items():
        out = np.full(5, 42, dtype=np.int32)
        numpy_backend.combine(ReduceOp(op), lower, higher, out)
        assert out.tolist() == expected, op


def test_numpy_combine_on_segment_views(numpy_backend: NumpyBackend) -> None:
    """Protocols fold segments of bigger buffers: views in, views out, neighbours untouched."""
    whole = np.arange(100, dtype=np.float64)
    incoming = np.ones(100, dtype=np.float64)
    numpy_backend.combine(ReduceOp("SUM"), incoming[20:40], whole[20:40], whole[20:40])
    expected = np.arange(100, dtype=np.float64)
    expected[20:40] += 1
    np.testing.assert_array_equal(whole, expected)


def test_numpy_combine_allocates_no_temporary(numpy_backend: NumpyBackend) -> None:
    """1 MiB folds write straight into `out` whichever input it aliases (no 1 MiB temporary)."""
    count = 1 << 17
    for name, dtype in (("SUM", "float64"), ("MAX", "float64"), ("LAND", "int64"), ("BXOR", "uint64")):
        lower, higher, third = (np.full(count, v, dtype=dtype) for v in (1, 2, 0))
        for out in (lower, higher, third):
            tracemalloc.start()
            numpy_backend.combine(ReduceOp(name), lower, higher, out)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert peak < lower.nbytes // 8, (name, peak)


def test_user_op_order_and_aliasing(numpy_backend: NumpyBackend) -> None:
    """A non-commutative user fold sees (lower, higher) in MPI's order for every aliasing of `out`."""

    def fold(lower: np.ndarray, higher: np.ndarray) -> None:
        higher[...] = 10 * lower + higher  # not commutative

    op = ReduceOp("USER", commutative=False, user_fold=fold)
    lower0, higher0 = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    expected = 10 * lower0 + higher0

    lower, higher, out = lower0.copy(), higher0.copy(), np.zeros(3)
    assert numpy_backend.combine(op, lower, higher, out) is None
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(lower, lower0)
    np.testing.assert_array_equal(higher, higher0)

    lower, higher = lower0.copy(), higher0.copy()
    numpy_backend.combine(op, lower, higher, lower)
    np.testing.assert_array_equal(lower, expected)
    np.testing.assert_array_equal(higher, higher0)

    lower, higher = lower0.copy(), higher0.copy()
    numpy_backend.combine(op, lower, higher, higher)
    np.testing.assert_array_equal(higher, expected)
    np.testing.assert_array_equal(lower, lower0)

    with pytest.raises(ValueError, match="user_fold"):
        numpy_backend.combine(ReduceOp("USER"), lower, higher, out)


def test_numpy_empty_and_copy(numpy_backend: NumpyBackend) -> None:
    buf = numpy_backend.empty(5, "int16")
    assert buf.shape == (5,) and buf.dtype == np.int16
    numpy_backend.copy(buf, np.arange(5, dtype=np.int16))
    assert buf.tolist() == [0, 1, 2, 3, 4]


# ---- DeferredBackend --------------------------------------------------------------------------


def drive(polls: list, order: list[int]) -> None:
    """Poll every pending fold round-robin (like an engine's progress sweep) until all are done,
    recording the index of each fold in `order` as it completes."""
    pending = dict(enumerate(polls))
    while pending:
        for index, poll in list(pending.items()):
            if poll():
                order.append(index)
                del pending[index]


def test_deferred_result_only_after_done() -> None:
    backend = DeferredBackend(seed=3, max_delay_polls=4)
    lower, higher = np.arange(8.0), np.full(8, 100.0)
    poll = backend.combine(ReduceOp("SUM"), lower, higher, higher)
    assert poll is not None
    polls_needed = 0
    while True:
        done = poll()
        if done:
            break
        polls_needed += 1
        np.testing.assert_array_equal(higher, np.full(8, 100.0))  # not folded yet: still the old data
    assert 1 <= polls_needed <= 4
    np.testing.assert_array_equal(higher, np.arange(8.0) + 100.0)
    assert poll() is True  # stays done and does not fold twice
    np.testing.assert_array_equal(higher, np.arange(8.0) + 100.0)
    assert backend.pending == 0 and backend.stats.completed == 1


def test_deferred_completes_out_of_order_reproducibly() -> None:
    def run(seed: int) -> tuple[list[int], list[np.ndarray], DeferredBackend]:
        backend = DeferredBackend(seed=seed, max_delay_polls=5)
        outs = [np.zeros(4, dtype=np.int64) for _ in range(16)]
        polls = [backend.combine(ReduceOp("SUM"), np.full(4, i), np.full(4, 1000), outs[i]) for i in range(16)]
        assert backend.stats.in_flight == 16 and backend.pending == 16
        order: list[int] = []
        drive(polls, order)
        return order, outs, backend

    order, outs, backend = run(seed=7)
    assert sorted(order) == list(range(16)) and order != list(range(16))
    assert backend.stats.completed_out_of_order > 0
    assert backend.stats.max_in_flight == 16 and backend.stats.in_flight == 0
    for i, out in enumerate(outs):
        assert out.tolist() == [1000 + i] * 4
    assert run(seed=7)[0] == order  # same seed, same completion order
    assert any(run(seed=s)[0] != order for s in range(8, 12))


def test_deferred_matches_numpy_for_every_op() -> None:
    backend = DeferredBackend(seed=1)
    for op, dtype_name in op_type_pairs():
        lower, higher = sample(dtype_name, 33, 5), sample(dtype_name, 33, 6)
        out = np.empty(33, dtype_name)
        assert backend.supports(ReduceOp(op), dtype_name)
        poll = backend.combine(ReduceOp(op), lower, higher, out)
        with np.errstate(over="ignore"):
            while not poll():
                pass
        np.testing.assert_array_equal(out, reference(op, lower, higher), err_msg=f"{op} {dtype_name}")
    assert not backend.supports(ReduceOp("MAX"), "complex128")


def test_deferred_catches_inputs_reused_before_done() -> None:
    backend = DeferredBackend(seed=0)
    lower, higher = np.ones(4), np.ones(4)
    poll = backend.combine(ReduceOp("SUM"), lower, higher, np.empty(4))
    lower[0] = 5.0  # a protocol that recycles its receive buffer too early
    with pytest.raises(InputModifiedError, match="lower"):
        while not poll():
            pass


def test_deferred_flush_completes_everything_in_start_order() -> None:
    backend = DeferredBackend(seed=2, max_delay_polls=50)
    polls = [backend.combine(ReduceOp("SUM"), np.full(3, float(i)), np.zeros(3), np.empty(3)) for i in range(5)]
    backend.flush()
    assert all(poll() for poll in polls) and backend.pending == 0
    assert backend.stats.completed_out_of_order == 0
    with pytest.raises(ValueError):
        DeferredBackend(max_delay_polls=0)


# ---- CupyBackend (needs a CUDA GPU and CuPy) ----------------------------------------------------


def _gpu_skip_reason() -> str | None:
    """Why the CuPy tests cannot run here, or None when they can."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install cupy-cuda12x on a GPU machine)"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy found no CUDA device"
    except Exception as error:
        return f"no usable CUDA device: {error}"
    return None


GPU_SKIP_REASON = _gpu_skip_reason()
needs_gpu = pytest.mark.skipif(GPU_SKIP_REASON is not None, reason=str(GPU_SKIP_REASON))


def wait(poll) -> None:
    """Spin on a backend poll (None means already done)."""
    while poll is not None and not poll():
        pass


@needs_gpu
def test_cupy_every_op_and_dtype_matches_numpy() -> None:
    import cupy

    from adaptcoll.backends.cupy_backend import CupyBackend

    backend, host = CupyBackend(), NumpyBackend()
    # sizes hit: tail only, head+body+tail, several packs per thread; offsets misalign the 16-byte body
    for op, dtype_name in op_type_pairs():
        reduce_op = ReduceOp(op)
        assert backend.supports(reduce_op, dtype_name)
        for count, offset in ((1, 0), (37, 1), (4099, 3), (1 << 20, 0)):
            lower = sample(dtype_name, count + offset, 11)[offset:]
            higher = sample(dtype_name, count + offset, 12)[offset:]
            expected = np.empty(count, dtype_name)
            with np.errstate(over="ignore"):
                host.combine(reduce_op, lower, higher, expected)
            if count <= 4099:
                np.testing.assert_array_equal(expected, reference(op, lower, higher))
            d_lower_whole = cupy.asarray(sample(dtype_name, count + offset, 11))
            d_higher_whole = cupy.asarray(sample(dtype_name, count + offset, 12))
            for target in ("third", "lower", "higher"):
                # written on CuPy's current (default) stream; the backend's non-blocking stream does not
                # wait for that stream by itself (the stream contract), so order it after the copies:
                # without this, `higher` was read before its copy landed (SUM uint64 n=1Mi out=third
                # failed on an H100 with stale pool memory in `higher`)
                lo, hi = d_lower_whole.copy()[offset:], d_higher_whole.copy()[offset:]
                backend.order_after(cupy.cuda.get_current_stream())
                out = {"third": backend.empty(count, dtype_name), "lower": lo, "higher": hi}[target]
                poll = backend.combine(reduce_op, lo, hi, out)
                assert poll is not None
                wait(poll)
                np.testing.assert_array_equal(
                    cupy.asnumpy(out), expected, err_msg=f"{op} {dtype_name} n={count} offset={offset} out={target}"
                )


# Special float values as bit patterns per (dtype, unsigned view): two NaNs with different payloads,
# infinities, the smallest subnormals, ordinary values, the largest finite value, and both zeros.
_SPECIAL_BITS = {
    "float16": (
        np.uint16,
        [0x7E01, 0x7E02, 0xFE03, 0x7C00, 0xFC00, 0x0001, 0x8001, 0x3E00, 0xBE00, 0x7BFF, 0x0000, 0x8000],
    ),
    "bfloat16": (
        np.uint16,
        [0x7FC1, 0x7FC2, 0xFFC3, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x3FC0, 0xBFC0, 0x7F7F, 0x0000, 0x8000],
    ),
    "float32": (
        np.uint32,
        [
            0x7FC00001,
            0x7FC00002,
            0xFFC00003,
            0x7F800000,
            0xFF800000,
            0x1,
            0x80000001,
            0x3FC00000,
            0xBFC00000,
            0x7F7FFFFF,
            0x0,
            0x80000000,
        ],
    ),
    "float64": (
        np.uint64,
        [
            0x7FF8000000000001,
            0x7FF8000000000002,
            0xFFF8000000000003,
            0x7FF0000000000000,
            0xFFF0000000000000,
            0x1,
            0x8000000000000001,
            0x3FF8000000000000,
            0xBFF8000000000000,
            0x7FEFFFFFFFFFFFFF,
            0x0,
            0x8000000000000000,
        ],
    ),
}


def _special_pairs(dtype_name: str) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of special values (as unsigned bits), repeated past one 16-byte pack per thread."""
    unsigned, bits = _SPECIAL_BITS[dtype_name]
    values = np.array(bits, dtype=unsigned)
    first, second = np.repeat(values, len(values)), np.tile(values, len(values))
    return np.tile(first, 97), np.tile(second, 97)


def _as_float32(dtype_name: str, bits: np.ndarray) -> np.ndarray:
    """The values as a NumPy float array (bfloat16 widened to float32 exactly: it is float32's top half)."""
    if dtype_name == "bfloat16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.view(dtype_name)


@needs_gpu
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("op", ["MAX", "MIN"])
def test_cupy_max_min_special_values_match_numpy(op: str, dtype_name: str) -> None:
    """NaN (with payloads), infinities, subnormals and signed zeros through the MAX/MIN kernels, every
    ordered pair, against numpy.maximum/minimum bit for bit: the NaN that wins keeps its payload and
    subnormals survive CuPy's -ftz=true. Two cases depend on which operand the kernel folds into
    (`acc = acc op in`), as with any MPI implementation: when both are NaN it returns the NaN in `acc`,
    and of two zeros the one in `acc`; those are checked as NaN / as zero, not bit for bit."""
    import cupy

    from adaptcoll.backends.cupy_backend import kernel_name, load_kernel

    ufunc = {"MAX": np.maximum, "MIN": np.minimum}[op]
    acc_bits, in_bits = _special_pairs(dtype_name)
    unsigned = acc_bits.dtype
    acc_f, in_f = _as_float32(dtype_name, acc_bits), _as_float32(dtype_name, in_bits)
    with np.errstate(invalid="ignore"):
        expected_f = ufunc(acc_f, in_f)
    if dtype_name == "bfloat16":
        expected = (expected_f.view(np.uint32) >> 16).astype(np.uint16)
    else:
        expected = expected_f.view(unsigned)
    # bit for bit where the result does not depend on the operand order; a NaN or a zero where it does
    both_nan = np.isnan(acc_f) & np.isnan(in_f)
    both_zero = (acc_f == 0) & (in_f == 0)
    exact = ~(both_nan | both_zero)

    kernel = load_kernel(kernel_name(op, dtype_name))
    d_acc, d_in = cupy.asarray(acc_bits), cupy.asarray(in_bits)
    kernel((4,), (128,), (d_acc, d_in, np.uint64(acc_bits.size)))
    got = cupy.asnumpy(d_acc)
    got_f = _as_float32(dtype_name, got)
    mismatch = np.flatnonzero(exact & (got != expected))
    assert mismatch.size == 0, [
        (hex(int(acc_bits[i])), hex(int(in_bits[i])), hex(int(got[i])), hex(int(expected[i]))) for i in mismatch[:8]
    ]
    assert np.isnan(got_f[both_nan]).all()
    assert (got_f[both_zero] == 0).all()
    # the kernel returns `acc`'s operand on those ties (bits of `acc`, not a canonical NaN)
    np.testing.assert_array_equal(got[both_nan | both_zero], acc_bits[both_nan | both_zero])


@needs_gpu
def test_cupy_combine_is_asynchronous_and_ordered_by_event() -> None:
    import cupy

    from adaptcoll.backends.cupy_backend import CupyBackend

    backend = CupyBackend()
    count = 1 << 26  # 512 MiB of float64 per operand: long enough to observe "not done yet"
    lower, higher = cupy.ones(count), cupy.ones(count)
    cupy.cuda.Device().synchronize()
    polls = [backend.combine(ReduceOp("SUM"), lower, higher, higher) for _ in range(8)]
    assert not polls[-1]()  # eight 1.5 GiB passes cannot be finished already
    wait(polls[-1])
    assert all(poll() for poll in polls)
    assert float(higher[0]) == 9.0 and float(higher[-1]) == 9.0


@needs_gpu
def test_cupy_copy_user_op_and_staging() -> None:
    import cupy

    from adaptcoll.backends.cupy_backend import CupyBackend, HostStaging, synchronize_producer

    backend = CupyBackend()
    src = cupy.arange(1000, dtype=cupy.float32)
    dst = backend.empty(1000, "float32")
    backend.copy(dst, src)
    np.testing.assert_array_equal(cupy.asnumpy(dst), np.arange(1000, dtype=np.float32))
    host = np.zeros(1000, np.float32)
    backend.copy(host, dst)  # device -> host works through the same call
    np.testing.assert_array_equal(host, np.arange(1000, dtype=np.float32))

    def fold(lower: np.ndarray, higher: np.ndarray) -> None:
        higher[...] = 10 * lower + higher

    user = ReduceOp("USER", commutative=False, user_fold=fold)
    lower, higher, out = cupy.full(5, 1.0), cupy.full(5, 2.0), cupy.zeros(5)
    wait(backend.combine(user, lower, higher, out))
    assert cupy.asnumpy(out).tolist() == [12.0] * 5 and cupy.asnumpy(higher).tolist() == [2.0] * 5

    staging = HostStaging()
    device = cupy.arange(4096, dtype=cupy.int64)
    pinned, poll = staging.to_host(device)
    wait(poll)
    np.testing.assert_array_equal(pinned, np.arange(4096))
    pinned *= 2
    back = cupy.zeros(4096, dtype=cupy.int64)
    wait(staging.to_device(pinned, back))
    np.testing.assert_array_equal(cupy.asnumpy(back), 2 * np.arange(4096))
    staging.release(pinned)
    assert staging.acquire(4096, np.int64) is pinned  # pooled
    synchronize_producer(back, backend.stream)


# ---- CupyBackend's host-side logic against a fake CuPy (runs everywhere) -------------------------


def test_launch_blocks_fat_blocks_one_per_sm_and_one_wave() -> None:
    from adaptcoll.backends.cupy_backend import PACKS_PER_THREAD, launch_blocks

    sms, wave = 132, 132 * 6
    assert PACKS_PER_THREAD == 4
    assert launch_blocks(1, 256, sms, wave) == 1
    assert launch_blocks(256 * 3, 256, sms, wave) == 3  # every block's threads get a pack
    assert launch_blocks(1 << 16, 256, sms, wave) == sms  # 1 MiB: one block per SM, ~2 packs per thread
    assert launch_blocks(1 << 18, 256, sms, wave) == 256  # 4 MiB: 4 packs per thread
    assert launch_blocks(1 << 24, 256, sms, wave) == wave  # 256 MiB: one full wave, grid-stride for the rest


class _FakeDeviceArray(np.ndarray):
    """Host memory posing as a cupy.ndarray: `.data.ptr` is the address of the first element."""

    @property
    def data(self):  # type: ignore[override]
        return type("Pointer", (), {"ptr": self.ctypes.data})()


def make_fake_cupy(launches: list) -> tuple[object, object]:
    """A stand-in `cupy`/`cupyx` pair whose kernels fold with NumPy and record how they were launched."""
    import ctypes

    current = {"stream": None}

    class Stream:
        def __init__(self, non_blocking: bool = False) -> None:
            self.ptr, self.synchronized = 4242, 0

        def __enter__(self):
            self.previous, current["stream"] = current["stream"], self
            return self

        def __exit__(self, *exc: object) -> None:
            current["stream"] = self.previous

        def synchronize(self) -> None:
            self.synchronized += 1

        def wait_event(self, event) -> None:
            self.waited = event

    class Device:
        def __init__(self, device_id: int | None = None) -> None:
            self.id = device_id or 0

        def __enter__(self):
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    class Event:
        def __init__(self, block: bool = False, disable_timing: bool = False) -> None:
            self.recorded_on = None

        def record(self, stream: Stream) -> None:
            self.recorded_on = stream

        @property
        def done(self) -> bool:
            return self.recorded_on is not None

    class RawModule:
        def __init__(self, code: str, options: tuple = ()) -> None:
            assert 'extern "C" __global__' in code and "ADAPTCOLL_ALL_OPS(int8" in code

        def compile(self) -> None:
            pass

        def get_function(self, name: str):
            _, op, dtype = name.split("_", 2)

            def function(grid: tuple, block: tuple, args: tuple, shared_mem: int = 0, stream=None) -> None:
                acc, incoming, count = args
                assert isinstance(acc, _FakeDeviceArray) and isinstance(incoming, _FakeDeviceArray)
                assert acc.dtype == np.dtype(dtype) and count == acc.size == incoming.size
                launches.append((name, grid, block, stream if stream is not None else current["stream"]))
                with np.errstate(over="ignore"):
                    UFUNC_BY_OP[op.upper()](acc, incoming, out=acc)

            return types.SimpleNamespace(kernel=function)  # a RawKernel: .kernel is the compiled function

    def memcpy_async(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        ctypes.memmove(dst, src, size)

    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: 1,
        getDeviceProperties=lambda i: {"multiProcessorCount": 2},
        memcpyAsync=memcpy_async,
        memcpyDefault=4,
        memcpyDeviceToDevice=3,
        streamSynchronize=lambda ptr: launches.append(("streamSynchronize", ptr)),
        getDevice=lambda: 0,
    )
    cupy = types.ModuleType("cupy")
    cupy.ndarray = _FakeDeviceArray
    cupy.cuda = types.SimpleNamespace(Stream=Stream, Device=Device, Event=Event, runtime=runtime)
    cupy.RawModule = RawModule
    cupy.asarray = lambda x: np.asarray(x).view(_FakeDeviceArray)
    cupy.empty = lambda count, dtype: np.empty(count, dtype).view(_FakeDeviceArray)
    cupy.asnumpy = lambda x, stream=None: np.array(x).view(np.ndarray)
    cupyx = types.ModuleType("cupyx")
    cupyx.empty_pinned = lambda shape, dtype: np.empty(shape, dtype)
    return cupy, cupyx


def test_cupy_backend_logic_with_fake_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from adaptcoll.backends import cupy_backend

    launches: list = []
    cupy, cupyx = make_fake_cupy(launches)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupyx", cupyx)
    monkeypatch.setattr(cupy_backend, "_MODULES", {})
    monkeypatch.setattr(cupy_backend, "_KERNELS", {})

    backend = cupy_backend.CupyBackend(blocks_per_sm=3)
    for op, dtype_name in op_type_pairs():
        for target in ("third", "lower", "higher"):
            lower = cupy.asarray(sample(dtype_name, 300, 1))
            higher = cupy.asarray(sample(dtype_name, 300, 2))
            out = {"third": backend.empty(300, dtype_name), "lower": lower, "higher": higher}[target]
            expected = reference(op, sample(dtype_name, 300, 1), sample(dtype_name, 300, 2))
            poll = backend.combine(ReduceOp(op), lower, higher, out)
            assert poll is not None and poll() is True
            np.testing.assert_array_equal(np.asarray(out), expected, err_msg=f"{op} {dtype_name} {target}")
            name, grid, block, stream = launches[-1]
            assert name == cupy_backend.kernel_name(op, dtype_name)
            assert stream is backend.stream  # launched on the backend's stream, not the default one
            assert 1 <= grid[0] <= 6 and block == (256,)

    big = cupy.asarray(np.ones(1 << 16, np.float32))
    backend.combine(ReduceOp("SUM"), big, big.copy(), big)
    assert launches[-1][1] == (6,)  # 16 Ki packs, capped at 2 SMs x 3 blocks (no occupancy API here)

    producer = cupy.cuda.Stream()
    backend.order_after(producer)  # waits on an event recorded on the producer, no host synchronization
    assert backend.stream.waited.recorded_on is producer

    src, dst = cupy.asarray(np.arange(10.0)), backend.empty(10, "float64")
    synced = backend.stream.synchronized
    backend.copy(dst, src)
    assert np.asarray(dst).tolist() == list(range(10)) and backend.stream.synchronized > synced
    with pytest.raises(ValueError, match="size mismatch"):
        backend.copy(dst, src[:5])

    user = ReduceOp("USER", commutative=False, user_fold=lambda lo, hi: hi.__setitem__(..., 10 * lo + hi))
    lower, higher, out = cupy.asarray(np.ones(4)), cupy.asarray(np.full(4, 2.0)), backend.empty(4, "float64")
    assert backend.combine(user, lower, higher, out) is None
    assert np.asarray(out).tolist() == [12.0] * 4 and np.asarray(higher).tolist() == [2.0] * 4
    assert backend.supports(user, "float64") and not backend.supports(ReduceOp("MAX"), "complex64")
    assert not backend.supports(ReduceOp("SUM"), ">f8")

    staging = cupy_backend.HostStaging()
    device = cupy.asarray(np.arange(64, dtype=np.int32))
    host, poll = staging.to_host(device)
    assert poll() and host.tolist() == list(range(64))
    host[:] = -host
    assert staging.to_device(host, device)() and np.asarray(device).tolist() == [-i for i in range(64)]
    staging.release(host)
    assert staging.acquire(64, "int32") is host

    class Produced:
        __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (0, False), "version": 3, "stream": 77}

    cupy_backend.synchronize_producer(Produced(), backend.stream)
    assert launches[-1] == ("streamSynchronize", 77)
