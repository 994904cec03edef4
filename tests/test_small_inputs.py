"""Bad input: every refusal names the offending argument or batch index; dtypes are preserved."""

from __future__ import annotations

import re

import numpy as np
import pytest
from small_testlib import spd_with_cond, tridiag_dense

import linalg_gpu as lg


def _word(name):
    """Regex matching ``name`` as a separate word (e.g. "A" but not the "A" of "Array")."""
    return rf"(?<![A-Za-z_]){re.escape(name)}(?![A-Za-z_])"


def _spd(rng, n=4, batch=(3, 4), dtype=np.float64):
    return spd_with_cond(rng, n, 10.0, batch, dtype)


BAD_DTYPES = [np.int64, np.int32, np.bool_, np.complex128, np.complex64, np.float16]
BAD_IDS = [np.dtype(d).name for d in BAD_DTYPES]


# ---------------------------------------------------------------------------------------------
# dtypes


@pytest.mark.parametrize("bad", BAD_DTYPES, ids=BAD_IDS)
def test_bad_dtype_A(rng, bad):
    A = np.eye(3, dtype=bad)
    b = np.ones(3)
    funcs = [lambda: lg.solve_small(A, b), lambda: lg.ldlt_solve(A, b), lambda: lg.ldlt_factor(A),
             lambda: lg.tridiagonalize(A), lambda: lg.eigh_small(A)]
    funcs += [lambda m=m: lg.solve_small(A, b, method=m) for m in lg.METHODS]
    for f in funcs:
        with pytest.raises(TypeError, match=_word("A")):
            f()


@pytest.mark.parametrize("bad", BAD_DTYPES, ids=BAD_IDS)
def test_bad_dtype_b(rng, bad):
    A = _spd(rng, 3, ())
    for b in (np.ones(3, dtype=bad), np.ones((3, 2), dtype=bad)):
        with pytest.raises(TypeError, match=_word("b")):
            lg.solve_small(A, b)
        with pytest.raises(TypeError, match=_word("b")):
            lg.ldlt_solve(A, b)


@pytest.mark.parametrize("bad", BAD_DTYPES, ids=BAD_IDS)
def test_bad_dtype_tridiagonal(bad):
    d, e, y = np.full(4, 3.0), np.ones(3), np.ones(4)
    cases = (("d", (d.astype(bad), e, y)), ("e", (d, e.astype(bad), y)), ("y", (d, e, y.astype(bad))))
    for name, args in cases:
        with pytest.raises(TypeError, match=_word(name)):
            lg.pcr_solve(*args)
        if name != "y":
            with pytest.raises(TypeError, match=_word(name)):
                lg.tridiag_eigh(*args[:2])


def test_non_numeric_input():
    with pytest.raises(TypeError, match=_word("A")):
        lg.solve_small([["a", "b"], ["c", "d"]], [1.0, 2.0])


def test_list_input_is_accepted():
    x = lg.solve_small([[2.0, 1.0], [1.0, 3.0]], [1.0, 2.0])
    np.testing.assert_allclose(x, np.linalg.solve([[2.0, 1.0], [1.0, 3.0]], [1.0, 2.0]))


# ---------------------------------------------------------------------------------------------
# shapes


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (5, 4, 3)])
def test_non_square(shape):
    A = np.ones(shape)
    b = np.ones(shape[:-1])
    for f in (lambda: lg.solve_small(A, b), lambda: lg.ldlt_factor(A), lambda: lg.tridiagonalize(A),
              lambda: lg.eigh_small(A)):
        with pytest.raises(ValueError, match=r"(?i)square.*" + re.escape(str(shape))):
            f()


@pytest.mark.parametrize("A", [np.ones(3), np.array(1.0)], ids=["1d", "0d"])
def test_ndim_below_two(A):
    for f in (lambda: lg.solve_small(A, np.ones(3)), lambda: lg.ldlt_factor(A),
              lambda: lg.tridiagonalize(A), lambda: lg.eigh_small(A)):
        with pytest.raises(ValueError, match=_word("A")):
            f()


def test_n_zero():
    A = np.ones((2, 0, 0))
    for f in (lambda: lg.solve_small(A, np.ones((2, 0))), lambda: lg.ldlt_factor(A),
              lambda: lg.tridiagonalize(A), lambda: lg.eigh_small(A)):
        with pytest.raises(ValueError, match=r"n = 0|n >= 1|n=0"):
            f()
    with pytest.raises(ValueError, match=_word("d")):
        lg.pcr_solve(np.ones(0), np.ones(0), np.ones(0))
    with pytest.raises(ValueError, match=_word("d")):
        lg.tridiag_eigh(np.ones((3, 0)), np.ones((3, 0)))


@pytest.mark.parametrize("bshape", [(3, 5), (4, 4), (4,), (2, 4), (3, 4, 2, 1), (3, 3, 2)])
def test_b_shape_mismatch(rng, bshape):
    A = _spd(rng, 4, (3,))
    with pytest.raises(ValueError, match=_word("b") + r".*" + re.escape(str(bshape))):
        lg.solve_small(A, np.ones(bshape))


def test_tridiagonal_shape_mismatch():
    with pytest.raises(ValueError, match=_word("e")):
        lg.pcr_solve(np.ones(4), np.ones(4), np.ones(4))
    with pytest.raises(ValueError, match=_word("e")):
        lg.tridiag_eigh(np.ones((2, 4)), np.ones((3, 3)))
    with pytest.raises(ValueError, match=_word("y")):
        lg.pcr_solve(np.ones(4), np.ones(3), np.ones(5))
    with pytest.raises(ValueError, match=_word("y")):
        lg.pcr_solve(np.ones((2, 4)), np.ones((2, 3)), np.ones((3, 4)))


def test_reflectors_shape_mismatch(rng):
    _, _, H = lg.tridiagonalize(_spd(rng, 5, (2,)), form_q=False)
    with pytest.raises(ValueError, match=_word("y")):
        H.apply_q(np.ones((2, 4)))
    with pytest.raises(ValueError, match=_word("y")):
        H.apply_qt(np.ones((3, 5)))
    with pytest.raises(TypeError, match=_word("y")):
        H.apply_qt(np.ones((2, 5), dtype=complex))


def test_empty_batch(rng):
    """Zero systems give empty results of numpy's shapes in every function (as np.linalg does)."""
    A, b = np.zeros((0, 4, 4)), np.zeros((0, 4))
    shapes = {"solve_small": [lg.solve_small(A, b).shape], "eigh_small": [a.shape for a in lg.eigh_small(A)],
              "ldlt_factor": [a.shape for a in lg.ldlt_factor(A)],
              "tridiagonalize": [a.shape for a in lg.tridiagonalize(A)],
              "pcr_solve": [lg.pcr_solve(np.zeros((0, 4)), np.zeros((0, 3)), b).shape],
              "tridiag_eigh": [a.shape for a in lg.tridiag_eigh(np.zeros((0, 4)), np.zeros((0, 3)))]}
    ref = {"solve_small": [np.linalg.solve(A, b[..., None])[..., 0].shape],
           "eigh_small": [a.shape for a in np.linalg.eigh(A)], "ldlt_factor": [(0, 4, 4), (0, 4), (0,)],
           "tridiagonalize": [(0, 4), (0, 3), (0, 4, 4)], "pcr_solve": [(0, 4)], "tridiag_eigh": [(0, 4), (0, 4, 4)]}
    assert shapes == ref


@pytest.mark.parametrize("method", lg.METHODS)
def test_no_right_hand_sides(rng, method):
    """b of shape (..., n, 0): an empty x, and the report of the systems themselves (as for b = 0)."""
    A = _spd(rng, 5, (3,))
    x, rep = lg.solve_small(A, np.zeros((3, 5, 0)), method=method, return_report=True)
    _, rep0 = lg.solve_small(A, np.zeros((3, 5, 1)), method=method, return_report=True)
    assert x.shape == (3, 5, 0) and x.dtype == A.dtype
    assert np.array_equal(rep.method, rep0.method) and np.array_equal(rep.ok, rep0.ok) and rep.ok.all()


def test_non_native_byte_order(rng):
    """Big-endian input (as read from some files) is solved like the native array, bitwise."""
    A = _spd(rng, 5, (4,))
    b = rng.standard_normal((4, 5))
    swapped = A.astype(A.dtype.newbyteorder()), b.astype(b.dtype.newbyteorder())
    np.testing.assert_array_equal(lg.solve_small(*swapped), lg.solve_small(A, b))
    for got, want in zip(lg.eigh_small(swapped[0]), lg.eigh_small(A), strict=True):
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------
# options


def test_unknown_method_lists_valid_ones(rng):
    A = _spd(rng)
    with pytest.raises(ValueError) as exc:
        lg.solve_small(A, np.ones((3, 4, 4)), method="cholesky")
    msg = str(exc.value)
    assert "cholesky" in msg
    for m in ("auto", "ldlt", "householder_pcr", "eig_truncate"):
        assert m in msg
    assert set(lg.METHODS) == {"auto", "ldlt", "householder_pcr", "eig_truncate"}


@pytest.mark.parametrize(("name", "value"), [("cond_max", "abc"), ("cond_max", None), ("cond_max", [1e5]),
                                           ("rtol", "1e-6"), ("rtol", [1e-3]), ("rtol", 1j)])
def test_option_not_a_number(rng, name, value):
    with pytest.raises(TypeError, match=_word(name) + ".*a real number"):
        lg.solve_small(_spd(rng), np.ones((3, 4, 4)), **{name: value})


@pytest.mark.parametrize("cond_max", [1.0, 0.5, 0.0, -1e5, np.inf, np.nan])
def test_bad_cond_max(rng, cond_max):
    with pytest.raises(ValueError, match="cond_max"):
        lg.solve_small(_spd(rng), np.ones((3, 4, 4)), cond_max=cond_max)


@pytest.mark.parametrize("rtol", [0.0, -1e-6, np.inf, np.nan])
def test_bad_rtol(rng, rtol):
    with pytest.raises(ValueError, match="rtol"):
        lg.solve_small(_spd(rng), np.ones((3, 4, 4)), rtol=rtol)


def test_memory_needs_key(rng):
    with pytest.raises(ValueError, match="key"):
        lg.solve_small(_spd(rng), np.ones((3, 4, 4)), memory=lg.SolverMemory())


def test_memory_wrong_type(rng):
    with pytest.raises(TypeError, match="memory"):
        lg.solve_small(_spd(rng), np.ones((3, 4, 4)), memory={}, key=1)


def test_memory_key_must_be_hashable(rng):
    with pytest.raises(TypeError, match=r"key must be hashable \(memory's key for this batch\); got \[1\]"):
        lg.solve_small(_spd(rng), np.ones((3, 4, 4)), memory=lg.SolverMemory(), key=[1])


@pytest.mark.parametrize("name, call", [
    ("return_report", lambda A, b: lg.solve_small(A, b, return_report="no")),
    ("return_report", lambda A, b: lg.solve_small(A, b, "auto", 1e5, None, "no")),
    ("check_finite", lambda A, b: lg.ldlt_solve(A, b, check_finite="no")),
    ("assume_symmetric", lambda A, b: lg.ldlt_factor(A, assume_symmetric="yes")),
    ("form_q", lambda A, b: lg.tridiagonalize(A, form_q="no")),
    ("check_finite", lambda A, b: lg.eigh_small(A, check_finite=0)),
    ("full_matrices", lambda A, b: lg.jacobi_svd(A[0, 0], "no")),
    ("compute_uv", lambda A, b: lg.jacobi_svd(A[0, 0], compute_uv="no")),
    ("return_info", lambda A, b: lg.jacobi_eigh(A[0, 0], return_info="no")),
    ("return_x", lambda A, b: lg.gsvd(A[0, 0], A[0, 0], "no")),
    ("compute_v", lambda A, b: lg.hyperbolic_svd(A[0, 0], np.ones(4), compute_v="no")),
    ("per_system", lambda A, b: lg.SolverMemory(per_system="no")),
])
def test_flags_must_be_bools(rng, name, call):
    """A flag given a string (or a number) is refused naming it: "no" would otherwise read as True."""
    with pytest.raises(TypeError, match=rf"^{name} must be True or False; got "):
        call(_spd(rng), np.ones((3, 4, 4)))


@pytest.mark.parametrize("threshold", [0.0, -0.5, 1.5])
def test_memory_bad_threshold(threshold):
    with pytest.raises(ValueError, match="threshold"):
        lg.SolverMemory(threshold=threshold)
    with pytest.raises(TypeError, match="threshold"):
        lg.SolverMemory(threshold=str(threshold))


# ---------------------------------------------------------------------------------------------
# NaN / Inf


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["A", "b"])
def test_nonfinite_raises_naming_first_index(rng, bad, where):
    A = _spd(rng, 4, (3, 4))
    b = rng.standard_normal((3, 4, 4))
    if where == "A":
        A[2, 0, 1, 1] = bad
        A[1, 2, 0, 0] = bad                                            # the first bad system
    else:
        b[2, 0, 1] = bad
        b[1, 2, 3] = bad                                               # the first bad system
    for method in lg.METHODS:
        with pytest.raises(ValueError, match=_word(where) + r".*" + re.escape("(1, 2)")):
            lg.solve_small(A, b, method=method)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_raises_in_every_function(rng, bad):
    A = _spd(rng, 4, (3, 4))
    A[1, 2, 3, 3] = bad
    for f in (lg.ldlt_factor, lg.tridiagonalize, lg.eigh_small):
        with pytest.raises(ValueError, match=_word("A") + r".*" + re.escape("(1, 2)")):
            f(A)
    d, e, y = np.full((3, 4, 5), 4.0), np.ones((3, 4, 4)), np.ones((3, 4, 5))
    for name in ("d", "e", "y"):
        args = {"d": d.copy(), "e": e.copy(), "y": y.copy()}
        args[name][2, 1, 0] = bad
        with pytest.raises(ValueError, match=_word(name) + r".*" + re.escape("(2, 1)")):
            lg.pcr_solve(args["d"], args["e"], args["y"])
        if name != "y":
            with pytest.raises(ValueError, match=_word(name) + r".*" + re.escape("(2, 1)")):
                lg.tridiag_eigh(args["d"], args["e"])


@pytest.mark.parametrize("method", lg.METHODS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_nonfinite_flagged_with_check_finite_false(rng, method, dtype):
    n = 5
    A = _spd(rng, n, (3, 4), dtype)
    b = rng.standard_normal((3, 4, n)).astype(dtype)
    A[1, 2, 0, 3] = A[1, 2, 3, 0] = np.nan
    b[0, 3, 1] = np.inf
    A[2, 2, 4, 4] = -np.inf
    bad = np.zeros((3, 4), dtype=bool)
    bad[1, 2] = bad[0, 3] = bad[2, 2] = True
    x, rep = lg.solve_small(A, b, method=method, check_finite=False, return_report=True)
    assert x.dtype == dtype
    np.testing.assert_array_equal(rep.nonfinite, bad)
    np.testing.assert_array_equal(rep.ok, ~bad)
    assert np.all(rep.method[bad] == "none")
    assert np.all(rep.method[~bad] == ("ldlt" if method == "auto" else method))
    assert np.all(np.isnan(x[bad]))
    assert np.all(np.isfinite(x[~bad]))
    assert rep.counts()["none"] == 3
    good = lg.solve_small(A[~bad], b[~bad], method=method)
    np.testing.assert_allclose(x[~bad], good, rtol=0, atol=16 * np.finfo(dtype).eps * np.abs(good).max())
    with pytest.raises(np.linalg.LinAlgError, match=re.escape("(0, 3)")):
        lg.solve_small(A, b, method=method, check_finite=False)


def test_nonfinite_unchecked_factorizations(rng):
    A = _spd(rng, 4, (3,))
    A[1, 0, 0] = np.nan
    _, _, ok = lg.ldlt_factor(A, check_finite=False)
    np.testing.assert_array_equal(ok, [True, False, True])


def test_nonfinite_messages_say_what_check_finite_false_gives(rng):
    A = _spd(rng, 4, (3,))
    A[1, 2, 2] = np.nan
    with pytest.raises(ValueError, match="flagged in the report"):
        lg.solve_small(A, np.ones((3, 4)))
    for f in (lg.eigh_small, lg.ldlt_factor, lg.tridiagonalize):
        with pytest.raises(ValueError, match="NaN results"):
            f(A)
    e = np.ones((3, 2))
    e[1, 0] = np.nan
    with pytest.raises(np.linalg.LinAlgError, match="NaN or Inf") as exc:
        lg.pcr_solve(np.full((3, 3), 4.0), e, np.ones((3, 3)), check_finite=False)
    assert "(1,)" in str(exc.value) and "singular" not in str(exc.value)
    with pytest.raises(np.linalg.LinAlgError, match="non-finite input") as exc:
        lg.solve_small(A, np.ones((3, 4)), check_finite=False)
    assert "method='auto'" not in str(exc.value) and "(1,)" in str(exc.value)


def test_pcr_zero_pivot_message(rng):
    d = np.array([[4.0, 4.0, 4.0], [0.0, 0.0, 0.0]])
    with pytest.raises(np.linalg.LinAlgError, match="singular") as exc:
        lg.pcr_solve(d, np.zeros((2, 2)), np.ones((2, 3)))
    assert "(1,)" in str(exc.value) and "NaN or Inf" not in str(exc.value)


# ---------------------------------------------------------------------------------------------
# symmetry


def _nonsym(rng, batch=(3, 4), n=4):
    A = _spd(rng, n, batch)
    A[2, 1, 0, 3] += 0.5                                               # upper triangle: not symmetric
    A[1, 3, 2, 1] += 0.5                                               # lower triangle: the first bad
    return A


def test_non_symmetric_raises_naming_first_system(rng):
    A = _nonsym(rng)
    b = rng.standard_normal((3, 4, 4))
    for f in (lambda: lg.solve_small(A, b), lambda: lg.ldlt_solve(A, b), lambda: lg.ldlt_factor(A),
              lambda: lg.tridiagonalize(A), lambda: lg.eigh_small(A),
              lambda: lg.solve_small(A, b, method="eig_truncate"),
              lambda: lg.solve_small(A, b, method="householder_pcr")):
        with pytest.raises(ValueError, match=r"(?i)symmetric.*" + re.escape("(1, 3)")):
            f()


def test_tiny_asymmetry_is_tolerated(rng):
    A = _spd(rng, 6, (4,))
    A[2, 0, 5] *= 1 + 4 * np.finfo(np.float64).eps
    lg.solve_small(A, np.ones((4, 6)))
    lg.ldlt_factor(A)


@pytest.mark.parametrize("method", lg.METHODS)
def test_assume_symmetric_uses_lower_triangle(rng, method):
    n = 6
    A = _spd(rng, n, (3, 4))
    b = rng.standard_normal((3, 4, n))
    junk = np.triu(rng.standard_normal((3, 4, n, n)) * 100, 1)
    Al = np.tril(A) + junk
    x1 = lg.solve_small(A, b, method=method)
    x2 = lg.solve_small(Al, b, method=method, assume_symmetric=True)
    np.testing.assert_allclose(x2, x1, rtol=0, atol=1e-12 * np.abs(x1).max())
    _, rep = lg.solve_small(Al, b, method=method, assume_symmetric=True, return_report=True)
    assert np.all(rep.ok) and np.all(rep.residual <= rep.rtol)


# ---------------------------------------------------------------------------------------------
# float32 stays float32


def test_float32_is_not_upcast(rng):
    n = 6
    A = _spd(rng, n, (2, 3), np.float32)
    b = rng.standard_normal((2, 3, n)).astype(np.float32)
    for method in lg.METHODS:
        x, rep = lg.solve_small(A, b, method=method, return_report=True)
        assert x.dtype == np.float32, method
        assert rep.residual.dtype == np.float32
        assert rep.rtol == pytest.approx(8 * n * np.finfo(np.float32).eps)
    assert lg.ldlt_solve(A, b[..., None]).dtype == np.float32
    L, D, _ = lg.ldlt_factor(A)
    assert L.dtype == D.dtype == np.float32
    d, e, Q = lg.tridiagonalize(A)
    assert d.dtype == e.dtype == Q.dtype == np.float32
    _, _, H = lg.tridiagonalize(A, form_q=False)
    assert H.apply_q(b).dtype == H.apply_qt(b).dtype == H.form_q().dtype == np.float32
    w, N = lg.eigh_small(A)
    assert w.dtype == N.dtype == np.float32
    w, V = lg.tridiag_eigh(d, e)
    assert w.dtype == V.dtype == np.float32
    z = lg.pcr_solve(d + np.float32(10), e, b)
    assert z.dtype == np.float32
    np.testing.assert_allclose(tridiag_dense(d + np.float32(10), e) @ z[..., None], b[..., None],
                               rtol=0, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# input layouts: views, Fortran order, mixed dtypes (solve_small copies only what is not already
# a C-contiguous batch of the compute dtype)


@pytest.mark.parametrize("method", lg.METHODS)
def test_layouts_give_the_contiguous_solution(rng, method):
    n = 5
    A = _spd(rng, n, (2, 6), np.float64)
    b = rng.standard_normal((2, 6, n))
    x_ref = np.linalg.solve(A, b[..., None])[..., 0]
    x = lg.solve_small(A, b, method=method)
    np.testing.assert_allclose(x, x_ref, rtol=0, atol=1e-12 * np.abs(x_ref).max())
    layouts = {
        "strided batch": (np.repeat(A, 2, axis=1)[:, ::2], np.repeat(b, 2, axis=1)[:, ::2]),
        "Fortran order": (np.asfortranarray(A), np.asfortranarray(b)),
        "b as (..., n, 1) view": (A, b[..., None]),
        "A float32, b float64": (A.astype(np.float32), b),
    }
    for name, (Al, bl) in layouts.items():
        xl = lg.solve_small(Al, bl, method=method)
        want = x_ref[..., None] if bl.ndim == 4 else x_ref
        assert xl.shape == want.shape and xl.dtype == np.float64, name
        # float32 A: the float64 solve of the rounded matrix, cond(A) = 10
        bound = 1e-12 if Al.dtype == np.float64 else 100 * np.finfo(np.float32).eps
        np.testing.assert_allclose(xl, want, rtol=0, atol=bound * np.abs(x_ref).max(), err_msg=name)
