"""Builds `spe_kernels`, the optional compiled CPU kernels of spe/contract.py.

    python -m pip install --no-build-isolation ./csrc/spe_kernels     (the Makefile does this)

Without it spe/ runs the same computation in pure PyTorch (tested equal).
"""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="spe-kernels",
    version="0.1.0",
    description="Compiled CPU kernels of SPE's code contraction (optional; spe/ falls back to PyTorch)",
    # -fopenmp: at::parallel_for only runs on several threads when _OPENMP is defined (ATen's
    # Parallel-inl.h); without it every kernel ran on one core. The runtime is torch's own libgomp.so.1.
    ext_modules=[CppExtension("spe_kernels", ["contract.cpp", "sine.cpp", "layout.cpp", "normal.cpp", "spectral.cpp"],
                              extra_compile_args=["-O3", "-march=native", "-mprefer-vector-width=512",
                                                  "-fno-math-errno", "-fopenmp"],
                              extra_link_args=["-fopenmp"])],
    cmdclass={"build_ext": BuildExtension},
)
