"""Build msa_ops._C with CMake.

setup.py only gathers facts from the installed torch (include and library folders, whether it has CUDA)
and hands them to CMakeLists.txt, which owns the source lists and the per-file CUDA architectures.

Environment:
  MSA_CUDA_ARCHS   CUDA targets, ";"-separated (default "9.0a;10.0a"); "none" builds the CPU kernels only.
  MSA_BUILD_DIR    CMake build folder (default ./build, git-ignored, reused between builds).
  MAX_JOBS         parallel compile jobs (default: number of CPUs).
  MSA_DEBUG        "1" for a -O0 -g build with device line info.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _find_nvcc() -> str | None:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and (Path(cuda_home) / "bin" / "nvcc").exists():
        return str(Path(cuda_home) / "bin" / "nvcc")
    for candidate in ("/usr/local/cuda/bin/nvcc",):
        if Path(candidate).exists():
            return candidate
    return shutil.which("nvcc")


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        import torch
        import torch.utils.cpp_extension as cpp_ext

        out_path = Path(self.get_ext_fullpath(ext.name)).resolve()
        build_dir = Path(os.environ.get("MSA_BUILD_DIR", ROOT / "build")).resolve()
        build_dir.mkdir(parents=True, exist_ok=True)

        archs = os.environ.get("MSA_CUDA_ARCHS", "9.0a;10.0a").strip()
        nvcc = _find_nvcc()
        with_cuda = torch.version.cuda is not None and nvcc is not None and archs.lower() != "none"
        if not with_cuda:
            why = ("torch has no CUDA" if torch.version.cuda is None else
                   "nvcc not found" if nvcc is None else "MSA_CUDA_ARCHS=none")
            print(f"msa_ops: building the CPU kernels only ({why})", file=sys.stderr)

        cfg = "Debug" if os.environ.get("MSA_DEBUG") == "1" else "Release"
        args = [
            f"-DCMAKE_BUILD_TYPE={cfg}",
            f"-DMSA_OUTPUT_FILE={out_path}",
            f"-DTORCH_INCLUDE_DIRS={';'.join(cpp_ext.include_paths())}",
            f"-DTORCH_LIBRARY_DIR={Path(torch.__file__).parent / 'lib'}",
            f"-DTORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-DMSA_WITH_CUDA={'ON' if with_cuda else 'OFF'}",
        ]
        if with_cuda:
            args += [f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DMSA_CUDA_ARCHS={archs}"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)

        cache = build_dir / "CMakeCache.txt"
        if cache.exists() and "Ninja" not in cache.read_text() and shutil.which("ninja"):
            shutil.rmtree(build_dir)  # generator changed; CMake refuses to switch in place
            build_dir.mkdir(parents=True)
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), *args], check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--config", cfg, "-j", jobs], check=True)
        out_path.parent.mkdir(parents=True, exist_ok=True)


setup(
    ext_modules=[CMakeExtension("msa_ops._C")],
    cmdclass={"build_ext": CMakeBuild},
)
