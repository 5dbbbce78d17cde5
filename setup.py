"""The one thing pyproject.toml cannot say: walctl's optional C extensions (issues 19 and 31).

walctl.format._native runs the per-record loops of the record format (decode, encode, input
framing) in C. It is optional: without a C compiler and Python headers the build of it fails,
setuptools says so and installs walctl without it, and walctl.format.bulk runs the same loops
in pure Python (same results, slower). WALCTL_NO_NATIVE=1 forces the Python path.

walctl.device._aio makes the Linux native AIO system calls of walctl.device.aio (io_submit,
io_getevents) without a ctypes object per write; optional the same way, Linux only: without it
(or with WALCTL_NO_NATIVE=1) walctl.device.aio makes the same calls through ctypes.
"""

import sys


from setuptools import Extension, setup

EXTENSIONS = [Extension("walctl.format._native", ["walctl/format/_native.c"], optional=True,
                        extra_compile_args=["-O2"])]
if sys.platform.startswith("linux"):
    EXTENSIONS.append(Extension("walctl.device._aio", ["walctl/device/_aio.c"], optional=True,
                                extra_compile_args=["-O2"]))

setup(ext_modules=EXTENSIONS)
