"""The one thing pyproject.toml cannot say: walctl's optional C extension (issue 19).

walctl.format._native runs the per-record loops of the record format (decode, encode, input
framing) in C. It is optional: without a C compiler and Python headers the build of it fails,
setuptools says so and installs walctl without it, and walctl.format.bulk runs the same loops
in pure Python (same results, slower). WALCTL_NO_NATIVE=1 forces the Python path.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("walctl.format._native", ["walctl/format/_native.c"], optional=True,
                             extra_compile_args=["-O2"])])
