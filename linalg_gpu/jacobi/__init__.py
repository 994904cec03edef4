"""Jacobi-type factorizations: pivot orderings, one-sided SVD, two-sided eigen / KLT (numpy or CuPy)."""

from . import orderings
from .klt import jacobi_eigh, klt
from .svd import jacobi_svd

__all__ = ["orderings", "jacobi_svd", "jacobi_eigh", "klt"]
