"""CUDA C++ sources of adaptcoll's reduction kernels, shipped as package data (adaptcoll.kernels).

`adaptcoll.backends.cupy_backend.kernel_source()` reads them; nothing here imports CUDA.
"""

__all__: list[str] = []
