"""Why GPU tests cannot run here (None if they can): the reason their skip marks print."""

from __future__ import annotations

__all__ = ["gpu_reason"]


def gpu_reason() -> str | None:
    """None with CuPy and a CUDA device, else what is missing."""
    try:
        import cupy
    except Exception as exc:
        return f"CuPy is not installed ({type(exc).__name__}); install the 'gpu' extra on a GPU machine"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy found no CUDA device"
    except Exception as exc:
        return f"no usable CUDA device ({exc})"
    return None
