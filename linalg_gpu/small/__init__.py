"""Many small symmetric systems at once (n <= 64 on the GPU; any n on the CPU)."""
from .householder import HouseholderReflectors, tridiagonalize
from .ldlt import ldlt_factor
from .pcr import pcr_solve
from .robust import METHODS, SolverMemory, SolverReport, ldlt_solve, solve_small
from .tridiag_eigh import eigh_small, tridiag_eigh

__all__ = ["ldlt_factor", "ldlt_solve", "tridiagonalize", "HouseholderReflectors", "pcr_solve",
           "tridiag_eigh", "eigh_small", "solve_small", "SolverReport", "SolverMemory", "METHODS"]
