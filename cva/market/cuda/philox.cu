// Keyed counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC'11; the Random123 library) and the Box-Muller transform.
//
// Launched by cva/market/rng.py, whose numpy functions are the twins of these kernels. A normal number
// is identified by (seed, purpose, outer path l, inner path m, date k, flat index q = j*d + a):
//   key = (seed, purpose), counter = (l, m, (k << 16) | (q >> 2), 0), lane = q & 3.
// One Philox call gives 4 words x0..x3 -> 4 uniforms u -> Box-Muller on the lane pairs (0, 1) and
// (2, 3): r = sqrt(-2 log u_even), z_even = r cos(2 pi u_odd), z_odd = r sin(2 pi u_odd).
// Uniforms are exact in T, so CPU and GPU differ only by the rounding of log and sincospi:
//   float : u = ((x >> 9) + 0.5f) * 2^-23      double: u = (x + 0.5) * 2^-32
//
// Output layout (both kernels): out[(i0 * n_inner + i1) * nq + (q - q0)] for i0 < n_outer,
// i1 < n_inner, q0 <= q < q0 + nq; one thread per Philox call (a 4-aligned group of q, partial at
// both ends), grid-stride loop over 64-bit indices.

namespace philox_detail {

constexpr unsigned M0 = 0xD2511F53u;
constexpr unsigned M1 = 0xCD9E8D57u;
constexpr unsigned W0 = 0x9E3779B9u;   // golden ratio
constexpr unsigned W1 = 0xBB67AE85u;   // sqrt(3) - 1

__device__ __forceinline__ uint4 philox4x32_10(uint4 c, unsigned k0, unsigned k1)
{
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r) { k0 += W0; k1 += W1; }                 // key schedule between rounds
        const unsigned hi0 = __umulhi(M0, c.x), lo0 = M0 * c.x;
        const unsigned hi1 = __umulhi(M1, c.z), lo1 = M1 * c.z;
        c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    }
    return c;
}

// Exactly representable uniforms in (0, 1).
template <typename T> __device__ __forceinline__ T to_uniform(unsigned x);
template <> __device__ __forceinline__ float to_uniform<float>(unsigned x)
{
    return (static_cast<float>(x >> 9) + 0.5f) * 1.1920928955078125e-07f;          // 2^-23
}
template <> __device__ __forceinline__ double to_uniform<double>(unsigned x)
{
    return (static_cast<double>(x) + 0.5) * 2.3283064365386962890625e-10;          // 2^-32
}

__device__ __forceinline__ float log_(float x) { return logf(x); }
__device__ __forceinline__ double log_(double x) { return log(x); }
__device__ __forceinline__ float sqrt_(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_(double x) { return sqrt(x); }
__device__ __forceinline__ void sincospi_(float x, float* s, float* c) { sincospif(x, s, c); }
__device__ __forceinline__ void sincospi_(double x, double* s, double* c) { sincospi(x, s, c); }

// Box-Muller on one lane pair: (r cos(2 pi u1), r sin(2 pi u1)), r = sqrt(-2 log u0).
template <typename T>
__device__ __forceinline__ void box_muller(unsigned x0, unsigned x1, T& z0, T& z1)
{
    const T u0 = to_uniform<T>(x0), u1 = to_uniform<T>(x1);
    const T r = sqrt_(T(-2) * log_(u0));
    T s, c;
    sincospi_(T(2) * u1, &s, &c);                      // 2 * u1 is exact
    z0 = r * c;
    z1 = r * s;
}

// The thread's Philox call: group g of the pair (i0, i1); calls f(q, lane, words) for its q in range.
template <typename F>
__device__ __forceinline__ void for_each_group(unsigned seed, unsigned purpose, unsigned l0, unsigned n_outer,
                                               unsigned m0, unsigned n_inner, unsigned date, unsigned q0,
                                               unsigned nq, F f)
{
    const unsigned g0 = q0 >> 2;
    const unsigned ng = ((q0 + nq - 1) >> 2) - g0 + 1;                   // groups per (outer, inner) pair
    const unsigned long long total = static_cast<unsigned long long>(n_outer) * n_inner * ng;
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    for (unsigned long long t = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
         t < total; t += stride) {
        const unsigned long long pair = t / ng;                            // i0 * n_inner + i1
        const unsigned g = g0 + static_cast<unsigned>(t - pair * ng);
        const unsigned i1 = static_cast<unsigned>(pair % n_inner);
        const unsigned i0 = static_cast<unsigned>(pair / n_inner);
        const uint4 w = philox4x32_10(make_uint4(l0 + i0, m0 + i1, (date << 16) | g, 0u), seed, purpose);
        f(pair * nq, g << 2, w);
    }
}

}  // namespace philox_detail

// Standard normals of T (float or double); see the header for keying and layout.
template <typename T>
__global__ void philox_normals(T* out, unsigned seed, unsigned purpose, unsigned l0, unsigned n_outer, unsigned m0,
                               unsigned n_inner, unsigned date, unsigned q0, unsigned nq)
{
    using namespace philox_detail;
    for_each_group(seed, purpose, l0, n_outer, m0, n_inner, date, q0, nq,
                   [&](unsigned long long row, unsigned qb, uint4 w) {
                       T z[4];
                       box_muller<T>(w.x, w.y, z[0], z[1]);
                       box_muller<T>(w.z, w.w, z[2], z[3]);
#pragma unroll
                       for (unsigned lane = 0; lane < 4; ++lane) {
                           const unsigned q = qb + lane;
                           if (q >= q0 && q - q0 < nq) out[row + (q - q0)] = z[lane];
                       }
                   });
}

// The raw Philox word of each q's own lane (same layout as philox_normals); T is unused.
template <typename T>
__global__ void philox_bits(unsigned* out, unsigned seed, unsigned purpose, unsigned l0, unsigned n_outer,
                            unsigned m0, unsigned n_inner, unsigned date, unsigned q0, unsigned nq)
{
    using namespace philox_detail;
    for_each_group(seed, purpose, l0, n_outer, m0, n_inner, date, q0, nq,
                   [&](unsigned long long row, unsigned qb, uint4 w) {
                       const unsigned x[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
                       for (unsigned lane = 0; lane < 4; ++lane) {
                           const unsigned q = qb + lane;
                           if (q >= q0 && q - q0 < nq) out[row + (q - q0)] = x[lane];
                       }
                   });
}
