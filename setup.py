"""Builds what the install compiles; the metadata is in pyproject.toml.

- The record and header codecs, the key index's batch put and the Spark source's column
  decoder (Cython). Without a C compiler
  the install fails loudly rather than silently giving the slower pure-Python code;
  FERRYMQ_NO_EXTENSIONS=1 selects that at run time.
- The Python modules of the `apache.rocketmq.v2` gRPC protocol, generated with grpcio-tools
  from the .proto files kept in proto/ (the protocol's definition, as apache/rocketmq-apis
  publishes it) into src/ferrymq/grpc/pb/. The generated code imports its siblings as
  `apache.rocketmq.v2`; those imports are made relative so the modules live inside ferrymq
  while the descriptors keep the protocol's own file and package names."""

from __future__ import annotations

import re
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Command, Extension, setup
from setuptools.command.build import build

ROOT = Path(__file__).resolve().parent
PROTO_ROOT = ROOT / "proto"
PROTO_PACKAGE = "apache/rocketmq/v2"
PB_DIR = ROOT / "src" / "ferrymq" / "grpc" / "pb"
_SIBLING_IMPORT = re.compile(r"^from apache\.rocketmq\.v2 import (\w+_pb2)", re.MULTILINE)


class BuildProto(Command):
    """Generates the protocol modules (messages, typing stubs, gRPC service stubs)."""

    description = "generate the apache.rocketmq.v2 gRPC modules from proto/"
    user_options: list[tuple[str, str | None, str]] = []

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        import tempfile

        import grpc_tools
        from grpc_tools import protoc

        sources = sorted((PROTO_ROOT / PROTO_PACKAGE).glob("*.proto"))
        if not sources:
            raise RuntimeError(f"no .proto files under {PROTO_ROOT / PROTO_PACKAGE}")
        well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
        with tempfile.TemporaryDirectory() as out:
            args = [
                "grpc_tools.protoc",
                f"-I{PROTO_ROOT}",
                f"-I{well_known}",
                f"--python_out={out}",
                f"--pyi_out={out}",
                f"--grpc_python_out={out}",
                *(str(s.relative_to(PROTO_ROOT)) for s in sources),
            ]
            if protoc.main(args) != 0:
                raise RuntimeError("grpc_tools.protoc failed on " + " ".join(s.name for s in sources))
            PB_DIR.mkdir(parents=True, exist_ok=True)
            for generated in sorted((Path(out) / PROTO_PACKAGE).iterdir()):
                text = _SIBLING_IMPORT.sub(r"from . import \1", generated.read_text())
                target = PB_DIR / generated.name
                if not target.exists() or target.read_text() != text:
                    target.write_text(text)


# Generated before build_py copies the package, so wheels carry the modules too; an editable
# install runs the same sub-commands and leaves them in the source tree.
build.sub_commands.insert(0, ("build_proto", None))

setup(
    cmdclass={"build_proto": BuildProto},
    ext_modules=cythonize(
        [
            Extension(
                "ferrymq.common.record._crecord",
                ["src/ferrymq/common/record/_crecord.pyx"],
                depends=["src/ferrymq/common/record/crc32_fold.h"],
                libraries=["z"],
                extra_compile_args=["-O2"],
            ),
            Extension(
                "ferrymq.store._cindex",
                ["src/ferrymq/store/_cindex.pyx"],
                libraries=["z"],
                extra_compile_args=["-O2"],
            ),
            Extension(
                "ferrymq.spark._ccolumns",
                ["src/ferrymq/spark/_ccolumns.pyx"],
                extra_compile_args=["-O2"],
            ),
            Extension(
                "ferrymq.client.sendbatch._cbatch",
                ["src/ferrymq/client/sendbatch/_cbatch.pyx"],
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
