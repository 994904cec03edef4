"""Every CUDA source (linalg_gpu/cuda, cva/market/cuda, cva/instruments/cuda, cva/engine/cuda) compiles with the
machine's nvcc (CI has nvcc but no GPU)."""

import shutil
import subprocess
from pathlib import Path

import pytest

CUDA_DIR = Path(__file__).resolve().parents[1] / "linalg_gpu" / "cuda"
ENGINE_DIR = Path(__file__).resolve().parents[1] / "cva" / "engine" / "cuda"
MARKET_DIR = Path(__file__).resolve().parents[1] / "cva" / "market" / "cuda"
INSTRUMENTS_DIR = Path(__file__).resolve().parents[1] / "cva" / "instruments" / "cuda"
CUDA_DIRS = (CUDA_DIR, MARKET_DIR, INSTRUMENTS_DIR, ENGINE_DIR)
NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine")
def test_every_cuda_source_compiles(tmp_path):
    failures = []
    for src in sorted(p for d in CUDA_DIRS for p in d.glob("*.cu")):
        proc = subprocess.run([NVCC, "-std=c++17", "-arch=sm_90", "-c", str(src), "-o", str(tmp_path / "k.o")],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            failures.append(f"{src.name}:\n{proc.stderr}")
    assert not failures, "\n".join(failures)


# Templates are only checked in full where they are instantiated: one instance of each kernel of the
# small solvers, on the code paths the launchers take (as linalg_gpu.small._gpu picks them).
INSTANCES = {
    "ldlt.cu": ["ldlt_solve<float, 8, 4>", "ldlt_solve<double, 33, 32>", "ldlt_solve_rolled<float, 64>",
                "ldlt_solve_rolled<double, 49>"],
    "householder_pcr.cu": ["householder_pcr_solve<float, 16, 4>", "householder_pcr_solve<float, 33, 32>",
                           "householder_pcr_solve<double, 64, 32>"],
    "eigh_small.cu": ["eigh_small<float, 9>", "eigh_small<float, 64>", "eig_truncate_solve<double, 33>",
                     "eig_truncate_solve<float, 40>"],
    "eigh_jacobi.cu": ["eigh_jacobi<float, 8>", "eigh_jacobi<float, 11>", "eigh_jacobi<double, 5>"],
    "solve_flags.cu": ["first_stage_flags<float>", "screening_flags<double>", "scatter_stage<float>",
                       "merge_later_stages<float>", "merge_later_stages<double>", "next_start_codes<int>"],
    "strided_gemv.cu": ["strided_gemv<float, 1>", "strided_gemv<double, 3>"],
    "strided_gram.cu": ["concat_gram<float>", "concat_gram<double>", "concat_gram<float, bool>",
                        "concat_gram_small<float, 5>", "concat_gram_small<double, 6>",
                        "concat_gram_small<float, 5, bool>"],
    ENGINE_DIR / "laguerre_lsm.cu": ["laguerre_normal_equations<double, 4>", "laguerre_normal_equations<float, 5>",
                                     "laguerre_fitted<double, 5>", "laguerre_fitted<float, 4>"],
    ENGINE_DIR / "affine_exercise.cu": ["affine_exercise<float, float, unsigned char>",
                                        "affine_exercise<float, double, unsigned char>",
                                        "affine_exercise<double, double, int>"],
    ENGINE_DIR / "asset_steps.cu": ["asset_steps<float>", "asset_steps<double>"],
    ENGINE_DIR / "gram_equations.cu": ["gram_equations<float>", "gram_equations<double>"],
    ENGINE_DIR / "euler_contributions.cu": ["euler_contributions<double>"],
    ENGINE_DIR / "solver_stats.cu": ["solver_stats<float>", "solver_stats<double>"],
    INSTRUMENTS_DIR / "vanilla_payoff.cu": ["vanilla_payoff<float>", "vanilla_payoff<double>"],
    ENGINE_DIR / "stopped_cashflows.cu": ["stopped_cashflows<float, double, unsigned short>",
                                          "stopped_cashflows<double, double, unsigned char>",
                                          "stopped_cashflows<float, float, int>"],
    MARKET_DIR / "lognormal_paths.cu": ["lognormal_paths<float>", "lognormal_paths<double>"],
}


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("src", sorted(INSTANCES, key=str), ids=lambda p: Path(p).name)
def test_kernel_instances_compile(tmp_path, src):
    unit = tmp_path / "instances.cu"
    refs = "".join(f"    (void)&{k};\n" for k in INSTANCES[src])
    unit.write_text(f'#include "{CUDA_DIR / src}"\nvoid instantiate()\n{{\n{refs}}}\n')
    proc = subprocess.run([NVCC, "-std=c++17", "-arch=sm_90", f"-I{CUDA_DIR}", "-c", str(unit), "-o",
                           str(tmp_path / "k.o")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine")
def test_compile_check_catches_a_syntax_error(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text("template <typename T> __global__ void k(T* x) { x[0] = ; }\n")
    proc = subprocess.run([NVCC, "-std=c++17", "-arch=sm_90", "-c", str(bad), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0


def test_kernel_source_changes_with_any_header(tmp_path):
    """CuPy caches compiled kernels by the source text it is given: a header edit must change it."""
    import shutil

    from linalg_gpu._kernels import _source

    for src in CUDA_DIR.iterdir():
        shutil.copy(src, tmp_path)
    before = _source("ldlt.cu", tmp_path)
    assert before == _source("ldlt.cu", tmp_path) and before.endswith((CUDA_DIR / "ldlt.cu").read_text())
    for header in sorted(tmp_path.glob("*.cuh")):
        text = header.read_text()
        header.write_text(text + "\n// edited\n")
        assert _source("ldlt.cu", tmp_path) != before, header.name
        header.write_text(text)
    assert _source("ldlt.cu", tmp_path) == before
