"""Device-buffer detection and CUDA-aware-MPI detection, with host-memory stand-ins for GPU arrays."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import fake_device as fd
import numpy as np
import pytest

from adaptcoll.device import aware as cuda_aware
from adaptcoll.device import driver as cuda_driver
from adaptcoll.device.aware import CUDA_AWARE_ENV, cuda_aware_mpi
from adaptcoll.device.driver import MemoryKind
from adaptcoll.device.memory import device_array_info, is_device_buffer, memory_kind


class FakeCAI:
    """Exports a host array through `__cuda_array_interface__` (same layout keys as NumPy's own
    `__array_interface__`, which is what the CAI was modelled on)."""

    def __init__(self, array: np.ndarray, stream: object = None, **overrides: object) -> None:
        self.array = array
        interface = dict(array.__array_interface__)
        interface["version"] = 3
        interface["stream"] = stream
        interface.update(overrides)
        self.__cuda_array_interface__ = interface


class FakeDLPack:
    """A DLPack producer that says which device its memory is on."""

    def __init__(self, device: tuple[int, int], shape: tuple[int, ...] = (4,), dtype: str = "float32") -> None:
        self.device, self.shape, self.dtype = device, shape, np.dtype(dtype)

    def __dlpack__(self, stream: object = None) -> object:
        raise NotImplementedError("never consumed in these tests")

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def layouts() -> list[np.ndarray]:
    """Host arrays of many layouts: contiguous, sliced, transposed, size-1 and empty axes."""
    base = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    return [
        base,
        base[1],
        base[:, ::2],
        base.T,
        base[:, :1, :],
        base[:, 1:2, :],  # a size-1 axis with an unusual stride is still contiguous
        base[::-1],
        np.arange(10, dtype=np.int16)[::3],
        np.zeros((0, 3), dtype=np.complex64),
        np.ones(7, dtype=np.uint8),
    ]


def test_is_device_buffer() -> None:
    host = np.arange(4.0)
    assert not is_device_buffer(host)
    assert not is_device_buffer(bytearray(8))
    assert not is_device_buffer(memoryview(b"abcd"))
    assert not is_device_buffer([1, 2, 3])
    assert not is_device_buffer(FakeCAI(host))  # host memory behind the interface: the driver says so
    assert is_device_buffer(FakeCAI(fd.device_array(host)))  # the fake driver's device memory (its arena)
    assert is_device_buffer(FakeDLPack((2, 0)))  # kDLCUDA
    assert is_device_buffer(FakeDLPack((13, 1)))  # kDLCUDAManaged
    assert not is_device_buffer(FakeDLPack((1, 0)))  # kDLCPU
    assert not is_device_buffer(FakeDLPack((3, 0)))  # kDLCUDAHost: pinned host memory

    class Raising:
        @property
        def __cuda_array_interface__(self) -> dict:
            raise AttributeError("tensor is on the CPU")

    assert not is_device_buffer(Raising())


def test_cai_layout_matches_numpy() -> None:
    for array in layouts():
        info = device_array_info(FakeCAI(array, stream=1))
        assert info.source == "cuda_array_interface"
        assert info.shape == array.shape
        assert info.dtype == array.dtype
        assert info.pointer == array.__array_interface__["data"][0]
        assert info.contiguous == array.flags.c_contiguous, (array.shape, array.strides)
        assert info.nbytes == array.nbytes
        assert info.stream == 1
        assert info.readonly is False


def test_cai_readonly_and_explicit_contiguous_strides() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    array.flags.writeable = False
    info = device_array_info(FakeCAI(array, strides=(16, 4)))
    assert info.readonly is True and info.contiguous is True and info.strides == (16, 4)
    assert device_array_info(FakeCAI(array, strides=(4, 12))).contiguous is False  # Fortran order


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"typestr": "<x9"}, "unknown typestr"),
        ({"typestr": 7}, "typestr must be a string"),
        ({"typestr": "|O"}, "not a fixed-size plain type"),
        ({"stream": 0}, "stream"),
        ({"strides": (8,)}, "do not match shape"),
        ({"mask": object()}, "mask"),
    ],
)
def test_cai_rejects_bad_interfaces(overrides: dict, match: str) -> None:
    fake = FakeCAI(fd.device_array(np.zeros((2, 3))), **overrides)
    assert is_device_buffer(fake)
    with pytest.raises(ValueError, match=match):
        device_array_info(fake)


def test_cai_missing_keys() -> None:
    fake = FakeCAI(np.zeros(3))
    del fake.__cuda_array_interface__["data"]
    with pytest.raises(ValueError, match="malformed"):
        device_array_info(fake)


def test_dlpack_device_info_and_host_objects() -> None:
    info = device_array_info(FakeDLPack((2, 3), shape=(2, 5), dtype="int32"))
    assert (info.source, info.device_type, info.device_id) == ("dlpack", 2, 3)
    assert info.shape == (2, 5) and info.dtype == np.int32 and info.nbytes == 40
    assert info.pointer is None and info.contiguous is None
    for host in (np.zeros(3), FakeDLPack((1, 0)), b"xy"):
        with pytest.raises(ValueError, match="not a CUDA device buffer"):
            device_array_info(host)


@pytest.mark.parametrize("value,expected", [("1", True), ("0", False), (" yes ", True), ("OFF", False)])
def test_env_override_wins(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv(CUDA_AWARE_ENV, value)
    monkeypatch.setattr(cuda_aware, "_alloc_kinds", lambda comm: pytest.fail("detection ran despite the override"))
    aware, reason = cuda_aware_mpi()
    assert aware is expected
    assert CUDA_AWARE_ENV in reason


def test_env_invalid_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CUDA_AWARE_ENV, "maybe")
    with pytest.raises(ValueError, match=CUDA_AWARE_ENV):
        cuda_aware_mpi()


def test_alloc_kinds_with_cuda_means_aware(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CUDA_AWARE_ENV, raising=False)
    monkeypatch.setattr(cuda_aware, "_alloc_kinds", lambda comm: "mpi,system,cuda:device,cuda:managed")
    monkeypatch.setattr(cuda_aware, "_mpix_query_cuda_support", lambda: pytest.fail("info key should decide"))
    aware, reason = cuda_aware_mpi()
    assert aware and "cuda:device" in reason
    monkeypatch.setattr(cuda_aware, "_alloc_kinds", lambda comm: "mpi,system")
    monkeypatch.setattr(cuda_aware, "_mpix_query_cuda_support", lambda: None)
    aware, reason = cuda_aware_mpi()
    assert not aware and "mpi,system" in reason


def test_detection_agrees_with_this_mpi(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the override, the answer matches what this MPI itself reports (independently queried)."""
    monkeypatch.delenv(CUDA_AWARE_ENV, raising=False)
    from mpi4py import MPI

    info = MPI.COMM_WORLD.Get_info()
    kinds = info.Get("mpi_memory_alloc_kinds") or ""
    info.Free()
    if any(kind.startswith("cuda") for kind in kinds.split(",")):
        expected = True
    else:
        library = ctypes.CDLL(MPI.__file__)
        query = getattr(library, "MPIX_Query_cuda_support", None)
        expected = bool(query()) if query is not None else False
    aware, reason = cuda_aware_mpi(MPI.COMM_WORLD)
    assert aware is expected, reason
    assert reason


def test_modules_do_not_import_cupy() -> None:
    code = (
        "import sys, adaptcoll.device, adaptcoll.decision.decide, adaptcoll.backends.cupy_backend; "
        "assert 'cupy' not in sys.modules, 'cupy was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


# -- the CUDA driver through ctypes, against a stand-in libcuda -----------------------------------

FAKE_LIBCUDA = r"""
#include <stdint.h>
#include <string.h>
/* One "device" range and one "managed" range, set by the test; anything else is unknown to CUDA. */
static uint64_t dev_lo, dev_hi, man_lo, man_hi;
static int inits, pushes, pops, syncs; static void *last_stream;
void fake_set(uint64_t a, uint64_t b, uint64_t c, uint64_t d) { dev_lo = a; dev_hi = b; man_lo = c; man_hi = d; }
int fake_counts(int which) { return which == 0 ? inits : which == 1 ? pushes : which == 2 ? pops : syncs; }
void *fake_last_stream(void) { return last_stream; }
int cuInit(unsigned flags) { inits++; return flags == 0 ? 0 : 1; }
int cuPointerGetAttribute(void *data, int attribute, uint64_t ptr) {
    int dev = ptr >= dev_lo && ptr < dev_hi, man = ptr >= man_lo && ptr < man_hi;
    if (!dev && !man) return 1;                                   /* CUDA_ERROR_INVALID_VALUE */
    if (attribute == 2) { *(unsigned *)data = 2; return 0; }      /* MEMORY_TYPE: DEVICE */
    if (attribute == 8) { *(int *)data = man; return 0; }         /* IS_MANAGED */
    if (attribute == 1) { *(void **)data = (void *)0x1234; return 0; } /* CONTEXT */
    return 1;
}
int cuCtxPushCurrent_v2(void *ctx) { pushes += ctx == (void *)0x1234; return 0; }
int cuCtxPopCurrent_v2(void **ctx) { pops++; return 0; }
int cuMemcpy(uint64_t dst, uint64_t src, size_t n) { memcpy((void *)dst, (void *)src, n); return 0; }
int cuStreamSynchronize(void *stream) { syncs++; last_stream = stream; return 0; }
"""


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    folder = tmp_path_factory.mktemp("libcuda")
    (folder / "fake_cuda.c").write_text(FAKE_LIBCUDA)
    built = subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(folder / "libcuda.so"), str(folder / "fake_cuda.c")],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        pytest.skip(f"no C compiler to build a stand-in libcuda: {built.stderr[-500:]}")
    lib = ctypes.CDLL(str(folder / "libcuda.so"))
    lib.fake_set.argtypes = [ctypes.c_uint64] * 4
    lib.fake_last_stream.restype = ctypes.c_void_p
    return lib


def test_cuda_driver_answers_memory_kinds_and_copies(fake_libcuda: ctypes.CDLL) -> None:
    """The ctypes bindings (argument types, attribute codes, context push/pop) against a libcuda whose
    answers the test controls: device and managed ranges, host memory CUDA does not know."""
    device, managed, host = np.arange(8.0), np.zeros(8), np.full(8, 7.0)
    lo, mlo = device.ctypes.data, managed.ctypes.data
    fake_libcuda.fake_set(lo, lo + device.nbytes, mlo, mlo + managed.nbytes)
    found = cuda_driver.CudaDriver(fake_libcuda)
    assert fake_libcuda.fake_counts(0) >= 1  # cuInit(0)
    assert found.pointer_kind(lo + 8) is MemoryKind.DEVICE
    assert found.pointer_kind(mlo) is MemoryKind.MANAGED
    assert found.pointer_kind(host.ctypes.data) is MemoryKind.HOST
    found.copy(host.ctypes.data, lo, 4 * 8)  # device -> host, in the pointer's context
    assert host.tolist() == [0.0, 1.0, 2.0, 3.0, 7.0, 7.0, 7.0, 7.0]
    assert fake_libcuda.fake_counts(1) == 1 and fake_libcuda.fake_counts(2) == 1
    found.synchronize_stream(2, lo)
    assert fake_libcuda.fake_counts(3) == 1 and fake_libcuda.fake_last_stream() == 2


def test_memory_kind_asks_the_driver_for_cai_pointers(fake_libcuda: ctypes.CDLL) -> None:
    """`__cuda_array_interface__` pointers are whatever the driver says; with no driver, host memory."""
    device, host = np.arange(4.0), np.arange(4.0)
    fake_libcuda.fake_set(device.ctypes.data, device.ctypes.data + device.nbytes, 0, 0)
    previous = cuda_driver.set_driver(cuda_driver.CudaDriver(fake_libcuda))
    try:
        assert memory_kind(FakeCAI(device)) is MemoryKind.DEVICE and is_device_buffer(FakeCAI(device))
        assert memory_kind(FakeCAI(host)) is MemoryKind.HOST and not is_device_buffer(FakeCAI(host))
        assert memory_kind(host) is MemoryKind.HOST  # NumPy arrays never ask
        cuda_driver.set_driver(cuda_driver.NoDriver("test"))
        assert memory_kind(FakeCAI(device)) is MemoryKind.HOST
    finally:
        cuda_driver.set_driver(previous)


def test_without_libcuda_every_pointer_is_host_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_driver, "_LIBRARIES", ("libcuda-that-does-not-exist.so",))
    loaded = cuda_driver._load()
    assert isinstance(loaded, cuda_driver.NoDriver) and "libcuda not found" in loaded.name
    assert loaded.pointer_kind(12345) is MemoryKind.HOST
