"""Batched Householder tridiagonalization A = Q T Q^T (Abbas-Turki-Graillat, section 4, eqs. 8-14, Algorithm 2).

For i = n, ..., 3 (1-based; 0-based rows n-1, ..., 2) row i of the current matrix U_{i+1}
is reduced by H_i = I - u_i u_i^T / b_i (eq. 8) with

    u_i = (A_i1, ..., A_i,i-1 + sign * sigma, 0, ..., 0),  b_i = u_i^T u_i / 2      (eq. 11)
    p_i = U_{i+1} u_i / b_i,  B_i = u_i^T p_i / (2 b_i),  q_i = p_i - B_i u_i          (eq. 12)
    U_i = U_{i+1} - q_i u_i^T - u_i q_i^T                                              (eq. 13)

and Q = H_n H_{n-1} ... H_3 is accumulated by eq. (14). The sign in eq. (11) is chosen as
the sign of A_i,i-1 so that no cancellation occurs; a row that is already reduced gets H_i = I.
Each matrix is scaled by a power of 2 to max |A_ij| ~ 1 first (the reflectors do not depend on the scale), so
that huge and tiny matrices neither overflow nor underflow. Only the lower triangle of A is used.
"""

from __future__ import annotations

import numpy as np

from .._backend import as_array, boolean_flags, check_dtype
from . import _common as C

__all__ = ["tridiagonalize", "HouseholderReflectors"]


def _symmetrize_lower_bl(A):
    """Full symmetric matrix from the lower triangle of a batch-last block (n, n, c)."""
    iu = np.triu_indices(A.shape[0], 1)
    S = A.copy()
    S[iu] = A[iu[1], iu[0]]
    return S


def _tridiagonalize_bl(A):
    """Eqs. (11)-(13) on a batch-last block. A (n, n, c) -> d (n, c), e (n-1, c), U (n, n, c), beta (n, c).

    Row i of U holds u_i, beta[i] = 1 / b_i (0 where H_i = I).
    """
    n, _, c = A.shape
    W = _symmetrize_lower_bl(A)                                         # (n, n, c) working copy
    amax = np.abs(W).max((0, 1))                                        # (c,) like LAPACK's dsytrd
    amax = np.where((amax > 0) & np.isfinite(amax), amax, 1)
    ex = np.minimum(np.frexp(amax)[1], np.finfo(A.dtype).maxexp - 2)     # 2^+-ex normal (the kernels')
    scale = np.ldexp(1.0, ex).astype(A.dtype)                           # a power of 2: exact
    W /= scale                                                          # no under/overflow in the squares
    U = np.zeros_like(W)                                                # (n, n, c)
    beta = np.zeros((n, c), dtype=A.dtype)                              # (n, c)
    e = np.zeros((max(n - 1, 0), c), dtype=A.dtype)                     # (n-1, c)
    for i in range(n - 1, 1, -1):
        x = W[i, :i]                                                    # (i, c)
        head2 = np.einsum("kc,kc->c", x[:-1], x[:-1])                   # (c,) squares below the subdiagonal
        xl = x[-1]                                                      # (c,)
        sigma = np.sqrt(head2 + xl * xl)                                # (c,)
        alpha = np.where(xl >= 0, -sigma, sigma)                        # (c,) new subdiagonal
        active = head2 > 0                                              # (c,) H_i != I
        b = np.where(active, sigma * sigma - alpha * xl, 1)             # (c,) b_i = u.u / 2
        inv_b = np.where(active, 1 / b, 0)                              # (c,)
        u = x.copy()                                                    # (i, c)
        u[-1] = xl - alpha
        u *= active
        p = np.einsum("jkc,kc->jc", W[:i, :i], u) * inv_b               # (i, c) eq. (12)
        Bi = np.einsum("kc,kc->c", u, p) * inv_b / 2                    # (c,)
        q = p - Bi * u                                                  # (i, c)
        W[:i, :i] -= q[:, None] * u[None] + u[:, None] * q[None]        # (i, i, c) eq. (13)
        e[i - 1] = np.where(active, alpha, xl)
        U[i, :i] = u
        beta[i] = inv_b
    if n > 1:
        e[0] = W[1, 0]
    d = np.einsum("iic->ic", W) * scale                                 # (n, c)
    return d, e * scale, U, beta


def _apply_reflectors_bl(U, beta, y, transpose):
    """Apply Q (or Q^T if ``transpose``) to y (n, r, c), Q = H_{n-1} ... H_2 (0-based rows)."""
    n = U.shape[0]
    y = y.copy()
    order = range(n - 1, 1, -1) if transpose else range(2, n)
    for i in order:                                                     # H y = y - u (u.y) / b
        u = U[i, :i]                                                    # (i, c)
        s = np.einsum("kc,krc->rc", u, y[:i]) * beta[i]                 # (r, c)
        y[:i] -= u[:, None] * s[None]
    return y


class HouseholderReflectors:
    """The Householder vectors of :func:`tridiagonalize`: apply Q or Q^T without forming Q.

    ``apply_qt(y)`` computes Q^T y and ``apply_q(z)`` computes Q z for y of shape (..., n) or
    (..., n, k) with the batch shape of the factored A (eq. 14 applied to vectors).
    """

    def __init__(self, U, beta, batch_shape):
        self._U, self._beta = U, beta                  # (B, n, n) u_i in row i, (B, n) 1 / b_i
        self.batch_shape, self.n = tuple(batch_shape), U.shape[-1]

    def _apply(self, y, transpose):
        y = as_array(y, "y", np)
        check_dtype(y, "y")
        vec = y.shape == self.batch_shape + (self.n,)
        if not vec and y.shape[:-1] != self.batch_shape + (self.n,):
            raise ValueError(f"y must have shape {self.batch_shape + (self.n,)} or "
                             f"{self.batch_shape + (self.n, 'k')}; got {y.shape}")
        yf = C.flatten_batch((y[..., None] if vec else y).astype(self._U.dtype, copy=False), 2)

        def core(U, beta, yb):
            return (_apply_reflectors_bl(U, beta, yb, transpose),)

        (out,) = C.map_chunks(core, (self._U, self._beta, yf), self.n)
        out = out.reshape(self.batch_shape + out.shape[1:])
        return out[..., 0] if vec else out

    def apply_qt(self, y):
        """Q^T y."""
        return self._apply(y, True)

    def apply_q(self, z):
        """Q z."""
        return self._apply(z, False)

    def form_q(self):
        """The orthogonal Q as an array (..., n, n) (eq. 14)."""
        eye = np.broadcast_to(np.eye(self.n, dtype=self._U.dtype), self.batch_shape + (self.n, self.n))
        return self.apply_q(eye)


@boolean_flags("form_q", "check_finite", "assume_symmetric")
def tridiagonalize(A, *, form_q=True, check_finite=True, assume_symmetric=False):
    """Householder reduction of a batch of symmetric matrices: A = Q T Q^T (eqs. 8-14).

    Parameters
    ----------
    A : (..., n, n) array_like, float32 or float64
        Symmetric matrices; only the lower triangle is used (NaN or Inf anywhere in A counts).
    form_q : bool, default True
        Return Q as an array; with False, return a :class:`HouseholderReflectors` that applies
        Q and Q^T to right-hand sides without forming Q (what the solvers use).
    check_finite : bool, default True
        Raise ``ValueError`` naming the first system that holds a NaN or an Inf; with False such
        systems get NaN outputs.
    assume_symmetric : bool, default False
        As in :func:`linalg_gpu.solve_small`.

    Returns
    -------
    d : (..., n) diagonal of T.
    e : (..., n-1) off-diagonal of T.
    Q : (..., n, n) orthogonal, or HouseholderReflectors when ``form_q=False``.

    Examples
    --------
    >>> import numpy as np, linalg_gpu as lg
    >>> X = np.random.default_rng(0).standard_normal((3, 5, 5)); A = X + X.transpose(0, 2, 1)
    >>> d, e, Q = lg.tridiagonalize(A)
    >>> T = np.zeros_like(A); i = np.arange(5)
    >>> T[:, i, i] = d; T[:, i[1:], i[:-1]] = e; T[:, i[:-1], i[1:]] = e
    >>> bool(np.allclose(Q @ T @ Q.transpose(0, 2, 1), A))
    True
    """
    A, batch, n = C.check_symmetric_input(A, "tridiagonalize", check_finite, assume_symmetric)
    d, e, U, beta = C.map_chunks(_tridiagonalize_bl, (C.flatten_batch(A, 2),), n)
    refl = HouseholderReflectors(U, beta, batch)
    d, e = d.reshape(batch + (n,)), e.reshape(batch + (n - 1,))
    return (d, e, refl.form_q()) if form_q else (d, e, refl)
