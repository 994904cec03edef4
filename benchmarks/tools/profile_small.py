"""One launch of each small-system kernel (n = 32, float32) for Nsight Compute: run under
`ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats`."""
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from linalg_gpu.small import _gpu  # noqa: E402

n, B = int(sys.argv[1]) if len(sys.argv) > 1 else 32, 2**17
rng = np.random.default_rng(0)
X = rng.standard_normal((2**12, n, n)).astype(np.float32)
A = cp.asarray(np.tile(X @ X.transpose(0, 2, 1) / n + np.eye(n, dtype=np.float32), (B // 2**12, 1, 1)))
b = cp.asarray(rng.standard_normal((B, n, 1)).astype(np.float32))
for _ in range(2):                      # the second round is the one to read (compiled, warm)
    _gpu.ldlt_stage(A, b, True)
    _gpu.householder_pcr_stage(A, b)
    _gpu.eigh_small(A[: B // 8])
cp.cuda.Device().synchronize()
