"""Jacobi-type factorizations: pivot orderings, one-sided SVD, two-sided eigen / KLT, hyperbolic SVD,
the symmetric indefinite eigenproblem and the Hari-Zimmermann GSVD (numpy or CuPy)."""

from . import orderings
from .gsvd import gsvd
from .hsvd import eigh_indefinite, hyperbolic_svd
from .klt import jacobi_eigh, klt
from .svd import jacobi_svd, jacobi_svdvals

__all__ = ["orderings", "jacobi_svd", "jacobi_svdvals", "jacobi_eigh", "klt", "hyperbolic_svd", "eigh_indefinite",
           "gsvd"]
