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
    ext_modules=[CppExtension("spe_kernels", ["contract.cpp"],
                              extra_compile_args=["-O3", "-march=native", "-fopenmp-simd"])],
    cmdclass={"build_ext": BuildExtension},
)
