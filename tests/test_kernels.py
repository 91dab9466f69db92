"""The CUDA kernels compile with nvcc for sm_80 and sm_90 and export exactly one kernel per (op, dtype)
in the backend's table plus the grouped buckets' gather and scatter, with 16-byte vector loads and
stores (read from the compiled output)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from adaptcoll.backends.cupy_backend import KERNEL_DTYPES_BY_OP, PIECE_KERNELS, kernel_name, kernel_source_path

KERNEL_DIR = Path(__file__).resolve().parents[1] / "kernels"
CU_FILES = sorted(KERNEL_DIR.glob("*.cu"))
ARCHS = ("sm_80", "sm_90")
NVCC = shutil.which("nvcc")

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: cannot compile the CUDA kernels here")


def elf_function_symbols(blob: bytes) -> set[str]:
    """Names of the global FUNC symbols of a 64-bit little-endian ELF file (a cubin)."""
    assert blob[:4] == b"\x7fELF" and blob[4] == 2 and blob[5] == 1, "not a 64-bit little-endian ELF"
    (shoff,) = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", blob, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    names: set[str] = set()
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != 2:  # SHT_SYMTAB
            continue
        strtab_offset = sections[link][4]
        for start in range(offset, offset + size, entsize):
            st_name, st_info = struct.unpack_from("<IB", blob, start)
            if st_info >> 4 == 1 and st_info & 0xF == 2:  # STB_GLOBAL, STT_FUNC
                end = blob.index(b"\0", strtab_offset + st_name)
                names.add(blob[strtab_offset + st_name : end].decode())
    return names


def expected_kernel_names() -> set[str]:
    """One fold per (op, dtype) in the backend's table, and the grouped buckets' gather and scatter."""
    return {kernel_name(op, dtype) for op, dtypes in KERNEL_DTYPES_BY_OP.items() for dtype in dtypes} | set(
        PIECE_KERNELS
    )


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Every kernels/*.cu compiled to a cubin per arch, the nvcc calls in parallel; the sm_90 call keeps its
    PTX (`--keep`: the same PTX `-ptx` writes, without a third compile of each source)."""
    out_dir = tmp_path_factory.mktemp("cubins")
    jobs: dict[tuple[str, str], tuple[subprocess.Popen, Path]] = {}
    ptx: dict[tuple[str, str], Path] = {}
    for source in CU_FILES:
        for arch in ARCHS:
            target = out_dir / f"{source.stem}.{arch}.cubin"
            cmd = [NVCC, f"-arch={arch}", "-cubin", "-o", str(target), str(source)]
            if arch == "sm_90":  # -ftz=true as cupy.RawModule always adds it: the PTX must still keep subnormals
                keep = out_dir / f"{source.stem}.keep"
                keep.mkdir()
                cmd[2:2] = ["-ftz=true", "--keep", "--keep-dir", str(keep)]
                ptx[(source.name, "ptx")] = keep / f"{source.stem}.ptx"
            jobs[(source.name, arch)] = (subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True), target)
    results = {}
    for key, (process, target) in jobs.items():
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, f"nvcc failed for {key}:\n{stderr}"
        assert "warning" not in stderr.lower(), f"nvcc warned for {key}:\n{stderr}"
        results[key] = target
    for key, path in ptx.items():
        assert path.is_file(), f"nvcc --keep left no PTX for {key} in {path.parent}"
        results[key] = path
    return results


def test_kernel_sources_exist_and_loader_finds_them() -> None:
    assert CU_FILES, "no CUDA sources in kernels/"
    assert kernel_source_path().resolve() in {path.resolve() for path in CU_FILES}


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_every_cu_file_compiles_and_exports_one_kernel_per_op_and_dtype(compiled: dict, arch: str) -> None:
    exported: set[str] = set()
    for source in CU_FILES:
        exported |= elf_function_symbols(compiled[(source.name, arch)].read_bytes())
    ours = {name for name in exported if name.startswith("adaptcoll_")}
    expected = expected_kernel_names()
    assert ours == expected, f"missing {sorted(expected - ours)}, unexpected {sorted(ours - expected)}"
    assert len(expected) == 106 + 2


@needs_nvcc
def test_kernels_use_16_byte_loads_and_stores(compiled: dict) -> None:
    """Each kernel's body moves 128 bits per global load/store (v4 x 32-bit or v2 x 64-bit)."""
    wide = re.compile(r"\.(v4\.(u32|b32|f32|s32)|v2\.(u64|b64|f64|s64))\b")
    for source in CU_FILES:
        ptx = compiled[(source.name, "ptx")].read_text()
        entries = re.split(r"\.visible \.entry ", ptx)[1:]
        assert entries
        for body in entries:
            name = body.split("(", 1)[0]
            loads = [line for line in re.findall(r"ld\.global[\w.]*", body) if wide.search(line)]
            stores = [line for line in re.findall(r"st\.global[\w.]*", body) if wide.search(line)]
            assert loads and stores, f"{name}: no 16-byte global load/store in its PTX"


@needs_nvcc
def test_float_math_keeps_subnormals_and_never_fuses(compiled: dict) -> None:
    """Compiled with CuPy's forced -ftz=true, no instruction flushes subnormals and no FMA appears,
    so float results round exactly like NumPy's on the host."""
    for source in CU_FILES:
        ptx = compiled[(source.name, "ptx")].read_text()
        assert ".ftz" not in ptx, re.findall(r".*\.ftz.*", ptx)[:5]
        assert not re.search(r"\bfma\.", ptx)
        assert "add.rn.f32" in ptx and "mul.rn.f64" in ptx  # float kernels are really in there


def test_kernel_names_follow_the_convention() -> None:
    assert kernel_name("SUM", "float32") == "adaptcoll_sum_float32"
    assert kernel_name("LXOR", "bool") == "adaptcoll_lxor_bool"
    assert kernel_name("BAND", "uint64") == "adaptcoll_band_uint64"
    with pytest.raises(KeyError):
        kernel_name("MAX", "complex64")
    with pytest.raises(KeyError):
        kernel_name("BAND", "float64")


def test_gpu_bench_runs_or_explains_why_not() -> None:
    """bench/gpu_kernels.py: with a GPU it prints bandwidths, without one it exits 2 with the reason."""
    import sys

    repo = Path(__file__).resolve().parents[1]
    script = repo / "bench" / "gpu_kernels.py"
    help_run = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=repo)
    assert help_run.returncode == 0 and "--sizes" in help_run.stdout
    run = subprocess.run(
        [sys.executable, str(script), "--sizes", "1M", "--iters", "3", "--warmup", "1"],
        capture_output=True,
        text=True,
        cwd=repo,
        timeout=600,
    )
    try:
        import cupy

        has_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        has_gpu = False
    if has_gpu:
        assert run.returncode == 0, run.stderr
        rows = [line.split() for line in run.stdout.splitlines() if line.startswith("SUM")]
        assert {row[1] for row in rows} == {"float32", "float64"}
        assert all(float(row[3]) > 0 and float(row[4]) > 0 for row in rows)
    else:
        assert run.returncode == 2
        assert "cannot run" in run.stderr and ("CuPy" in run.stderr or "CUDA" in run.stderr)
