"""linalg_gpu: batched small symmetric solvers and Jacobi-type factorizations, numpy or CuPy."""
from .jacobi import eigh_indefinite, gsvd, hyperbolic_svd, jacobi_eigh, jacobi_svd, klt
from .small import (
                    METHODS,
                    HouseholderReflectors,
                    SolverMemory,
                    SolverReport,
                    eigh_small,
                    ldlt_factor,
                    ldlt_solve,
                    pcr_solve,
                    solve_small,
                    tridiag_eigh,
                    tridiagonalize,
)

__version__ = "0.1.0"
__all__ = ["ldlt_factor", "ldlt_solve", "tridiagonalize", "HouseholderReflectors", "pcr_solve",
           "tridiag_eigh", "eigh_small", "solve_small", "SolverReport", "SolverMemory", "METHODS",
           "jacobi_svd", "jacobi_eigh", "klt", "hyperbolic_svd", "eigh_indefinite", "gsvd"]
