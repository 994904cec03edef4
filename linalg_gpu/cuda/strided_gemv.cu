// Batched products of strided rows with a few vectors per set, out[b, m, q] = sum_k a[b sa + m lda + k] w[b sw + k Q + q]
// for q < Q, each sum over k = 0, 1, ..., K - 1 in that order: an output has the same bits whatever the batch count.
// cuBLAS's strided-batched GEMM picks its kernel, and with it the order of the sums, by the batch count, so a
// chunk of outer paths of another size gave other last bits (measured on an H100: 44 % of the products of
// 2048 x 128 x 4 sets differed in a batch of 4096). A block stages ROWS rows, 32 columns at a time, in shared
// memory (the rows' columns read by consecutive threads: coalesced where one thread per row read a row each),
// then each thread sums its row; up to four columns (one asset's slice) a thread reads its row itself, the same
// sums. numpy twin: linalg_gpu.strided.matmul (a @ w).
template <typename T, int Q>
__global__ void __launch_bounds__(128) strided_gemv(const T* __restrict__ a, long long lda, long long sa,
                                                    const T* __restrict__ w, long long sw, T* __restrict__ out,
                                                    long long B, long long M, int K)
{
    constexpr int ROWS = 128, COLS = 32;
    __shared__ T tile[ROWS][COLS + 1];                               // (+1: a thread's row walk hits every bank)
    const long long total = B * M;
    const int t = threadIdx.x;
    if (K <= 4) {              // few columns (one asset's slice): each thread reads its row itself, the same sums
        for (long long i = (long long)blockIdx.x * ROWS + t; i < total; i += (long long)gridDim.x * ROWS) {
            const long long b = i / M;
            const T* row = a + b * sa + (i - b * M) * lda;
            const T* wb = w + b * sw;
            T acc[Q];
            for (int q = 0; q < Q; ++q) acc[q] = T(0);
            for (int k = 0; k < K; ++k) {
                const T x = row[k];
                for (int q = 0; q < Q; ++q) acc[q] += x * wb[k * Q + q];
            }
            for (int q = 0; q < Q; ++q) out[i * Q + q] = acc[q];
        }
        return;
    }
    for (long long r0 = (long long)blockIdx.x * ROWS; r0 < total; r0 += (long long)gridDim.x * ROWS) {
        const long long i = r0 + t;                                  // this thread's row
        const long long b = (i < total ? i : total - 1) / M;
        T acc[Q];
        for (int q = 0; q < Q; ++q) acc[q] = T(0);
        for (int k0 = 0; k0 < K; k0 += COLS) {
            __syncthreads();
            const int c = t % COLS;
            for (int r = t / COLS; r < ROWS; r += 128 / COLS) {      // row r0 + r, column k0 + c
                const long long ir = r0 + r;
                T v = T(0);
                if (ir < total && k0 + c < K) {
                    const long long br = ir / M;
                    v = a[br * sa + (ir - br * M) * lda + k0 + c];
                }
                tile[r][c] = v;
            }
            __syncthreads();
            if (i < total) {
                const T* wb = w + b * sw;
                const int kn = min(COLS, K - k0);
                for (int k = 0; k < kn; ++k) {
                    const T x = tile[t][k];
                    for (int q = 0; q < Q; ++q) acc[q] += x * wb[(k0 + k) * Q + q];
                }
            }
        }
        if (i < total)
            for (int q = 0; q < Q; ++q) out[i * Q + q] = acc[q];
    }
}
