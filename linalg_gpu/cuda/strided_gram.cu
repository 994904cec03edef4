// Weighted Gram matrices of rows made of two pieces, G[b] = alpha sum_m w[b, m] z_m z_m^T with
// z_m = (s[b, m, 0 .. d-1], f[b, m, 0 .. e-1]), n = d + e: s's rows strided (s + b ss + m lds, as one date's slice
// of paths lies), f strided (f + b fsb + m fsm + c fsc: interleaved (B, M, e), or planes (e, B, M) that are the
// caller's arrays themselves), w contiguous (B, M) of T or of bool (a mask, read as 0 and 1 without a
// cast) or null (all ones); only G's first ``rows`` rows are formed, into out (B, rows, n) (the regressions need the
// regressors' rows, not the cashflows').
//
// One block per (set, 32 x 32 tile of G). The rows pass through shared memory 64 at a time (the next 64 read into
// registers while the current ones are summed); each of four thread groups owns 16 of them and a thread
// accumulates a 4 x 4 block of the tile over its group's rows. The sums have a fixed order (per stage in T, the
// stages added in double, then the groups 0 + 1 + 2 + 3): the same bits whatever B, which cuBLAS's strided-batched
// GEMM does not give (its kernel depends on the batch count), and float32 input summed to about float64's accuracy
// over the stages. numpy twin: linalg_gpu.strided.concat_gram.
template <typename T>
__device__ __forceinline__ void load4(const T* p, T (&o)[4]);

template <>
__device__ __forceinline__ void load4<float>(const float* p, float (&o)[4])
{
    const float4 q = *reinterpret_cast<const float4*>(p);
    o[0] = q.x; o[1] = q.y; o[2] = q.z; o[3] = q.w;
}

template <>
__device__ __forceinline__ void load4<double>(const double* p, double (&o)[4])
{
    const double2 a = *reinterpret_cast<const double2*>(p), b = *reinterpret_cast<const double2*>(p + 2);
    o[0] = a.x; o[1] = a.y; o[2] = b.x; o[3] = b.y;
}

template <typename T, typename W = T>
__global__ void __launch_bounds__(256) concat_gram(const T* __restrict__ s, long long lds, long long ss, int d,
                                                   const T* __restrict__ f, long long fsb, long long fsm,
                                                   long long fsc, int e, const W* __restrict__ w,
                                                   T* __restrict__ out, int M, int rows, T alpha)
{
    constexpr int TS = 32, RT = 64, PER = RT * TS / 256, GROUP_ROWS = RT / 4;
    constexpr int TILE_BYTES = 2 * RT * TS * sizeof(T), RED_BYTES = 3 * TS * TS * sizeof(double);
    __shared__ __align__(16) unsigned char smem[TILE_BYTES > RED_BYTES ? TILE_BYTES : RED_BYTES];
    T (*za)[TS] = reinterpret_cast<T (*)[TS]>(smem);                 // weighted rows: the tile's row block
    T (*zc)[TS] = reinterpret_cast<T (*)[TS]>(smem + RT * TS * sizeof(T));   // unweighted: its column block
    double (*red)[TS][TS] = reinterpret_cast<double (*)[TS][TS]>(smem);      // after the rows: groups 1..3

    const long long b = blockIdx.x;
    const int n = d + e, tiles = (n + TS - 1) / TS;
    const int ti = blockIdx.y / tiles, tj = blockIdx.y % tiles;     // (blockIdx.y < ceil(rows / 32) tiles)
    const int t = threadIdx.x, g = t / 64, ri = (t % 64) / 8, ci = t % 8;
    const int c = t % TS, r_first = t / TS;                          // this thread's column and first row to load
    // the column this thread loads, for the row block and the column block: (pointer, row stride) or none
    const T* fb = f ? f + b * fsb : nullptr;
    const int ca = ti * TS + c, cc = tj * TS + c;
    const T* pa = ca < d ? s + b * ss + ca : (ca < n ? fb + (ca - d) * fsc : nullptr);
    const T* pc = cc < d ? s + b * ss + cc : (cc < n ? fb + (cc - d) * fsc : nullptr);
    const long long sa = ca < d ? lds : fsm, sc = cc < d ? lds : fsm;
    const W* wb = w ? w + b * (long long)M : nullptr;

    T va[PER], vc[PER];
    auto fetch = [&](int m0) {
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int m = m0 + r_first + i * (256 / TS);
            const bool in = m < M;
            T a = in && pa ? pa[m * sa] : T(0);
            vc[i] = in && pc ? pc[m * sc] : T(0);
            if (wb && in) a *= T(wb[m]);
            va[i] = a;
        }
    };
    double acc[4][4];
#pragma unroll
    for (int p = 0; p < 4; ++p)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[p][q] = 0.0;
    fetch(0);
    for (int m0 = 0; m0 < M; m0 += RT) {
        __syncthreads();
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            za[r_first + i * (256 / TS)][c] = va[i];
            zc[r_first + i * (256 / TS)][c] = vc[i];
        }
        __syncthreads();
        if (m0 + RT < M) fetch(m0 + RT);                             // in flight while these rows are summed
        T part[4][4];
#pragma unroll
        for (int p = 0; p < 4; ++p)
#pragma unroll
            for (int q = 0; q < 4; ++q) part[p][q] = T(0);
#pragma unroll 4
        for (int r = g * GROUP_ROWS; r < (g + 1) * GROUP_ROWS; ++r) {
            T x[4], y[4];
            load4<T>(&za[r][ri * 4], x);
            load4<T>(&zc[r][ci * 4], y);
#pragma unroll
            for (int p = 0; p < 4; ++p)
#pragma unroll
                for (int q = 0; q < 4; ++q) part[p][q] += x[p] * y[q];
        }
#pragma unroll
        for (int p = 0; p < 4; ++p)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[p][q] += (double)part[p][q];
    }
    __syncthreads();                                                 // the rows' memory becomes red
    if (g > 0)
#pragma unroll
        for (int p = 0; p < 4; ++p)
#pragma unroll
            for (int q = 0; q < 4; ++q) red[g - 1][ri * 4 + p][ci * 4 + q] = acc[p][q];
    __syncthreads();
    if (g == 0) {
        T* ob = out + b * (long long)rows * n;
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int row = ti * TS + ri * 4 + p;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int col = tj * TS + ci * 4 + q;
                double v = acc[p][q];
                for (int k = 0; k < 3; ++k) v += red[k][ri * 4 + p][ci * 4 + q];
                if (row < rows && col < n) ob[row * n + col] = T((double)alpha * v);
            }
        }
    }
}

// The same Gram matrices for few columns (n = N <= SMALL_GRAM_COLUMNS of strided.py): one warp per set, lane l
// summing rows l, l + 32, ... in double (each product in T), then the 32 lanes' sums added by a fixed butterfly
// (__shfl_xor_sync, lane 0's order): the same bits whatever B, and whatever ``rows`` for the rows formed. The
// 32 x 32 tiles of concat_gram would leave most of a block idle for n of one asset's slice and a few cashflows
// (n = 5 in a desk's stacked one-asset regressions), with a block per set of a few dozen paths.
template <typename T, int N, typename W = T>
__global__ void __launch_bounds__(256) concat_gram_small(const T* __restrict__ s, long long lds, long long ss,
                                                         int d, const T* __restrict__ f, long long fsb,
                                                         long long fsm, long long fsc, int e,
                                                         const W* __restrict__ w, T* __restrict__ out, long long B,
                                                         int M, int rows, T alpha)
{
    const int lane = threadIdx.x % 32;
    const long long warps = (long long)gridDim.x * blockDim.x / 32;
    for (long long b = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32; b < B; b += warps) {   // a warp's sets
        const T* sb = s + b * ss;
        const T* fb = f ? f + b * fsb : nullptr;
        const W* wb = w ? w + b * (long long)M : nullptr;
        double acc[N][N];
#pragma unroll
        for (int r = 0; r < N; ++r)
#pragma unroll
            for (int c = 0; c < N; ++c) acc[r][c] = 0.0;
        for (int m = lane; m < M; m += 32) {
            T z[N];
#pragma unroll
            for (int c = 0; c < N; ++c) z[c] = c < d ? sb[m * lds + c] : fb[m * fsm + (c - d) * fsc];
            const T wm = wb ? T(wb[m]) : T(1);
#pragma unroll
            for (int r = 0; r < N; ++r) {
                if (r < rows) {
                    const T zr = wb ? z[r] * wm : z[r];
#pragma unroll
                    for (int c = 0; c < N; ++c) acc[r][c] += (double)(zr * z[c]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < N; ++r) {
            if (r < rows) {
#pragma unroll
                for (int c = 0; c < N; ++c) {
                    double v = acc[r][c];
#pragma unroll
                    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
                    if (lane == 0) out[(b * rows + r) * N + c] = T((double)alpha * v);
                }
            }
        }
    }
}
