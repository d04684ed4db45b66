"""Builds the compiled record and header codecs (Cython) when the package is installed; the metadata is
in pyproject.toml. Without a C compiler the install fails loudly rather than silently giving
the slower pure-Python codec; FERRYMQ_NO_EXTENSIONS=1 selects that one at run time."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(
                "ferrymq.common.record._crecord",
                ["src/ferrymq/common/record/_crecord.pyx"],
                libraries=["z"],
                extra_compile_args=["-O2"],
            ),
            Extension(
                "ferrymq.remoting._cheader",
                ["src/ferrymq/remoting/_cheader.pyx"],
                extra_compile_args=["-O2"],
            ),
        ],
        compiler_directives={"language_level": "3"},
    ),
)
