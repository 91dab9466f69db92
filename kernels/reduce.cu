// In-place reduction kernels for adaptcoll's CUDA backend: acc[i] = acc[i] op in[i].
//
// One extern "C" kernel per (op, dtype), named adaptcoll_<op>_<dtype> with the op in lower case and
// the dtype as NumPy names it (adaptcoll_sum_float32, adaptcoll_land_bool, ...). Signature:
//     void adaptcoll_<op>_<dtype>(T* acc, const T* in, unsigned long long n)
// Every kernel is a grid-stride loop that moves 16 bytes per load/store where `acc` and `in` share
// their alignment (after peeling a short head), several packs per thread per pass, with a scalar tail. `in` may be `acc` itself but must
// not overlap it partially. Self-contained (no #include), so nvcc and NVRTC (cupy.RawModule) both
// compile it. Semantics follow NumPy's ufuncs, so the GPU and host backends agree bit for bit (ties aside, below):
// integer SUM/PROD wrap, logical ops store 1/0, float MAX/MIN propagate NaN, float16/bfloat16
// arithmetic is done in float32 and rounded back (as NumPy does for float16), complex products are
// not contracted into FMAs, and subnormals survive even under CuPy's -ftz=true. Where MAX/MIN tie
// (two NaNs, or +0 and -0) the kernel keeps `acc`'s bits; NumPy's pick there varies by dtype and CPU.

typedef unsigned long long u64;

// ---- element types that C++ lacks ------------------------------------------------------------

struct alignas(2) f16 { unsigned short bits; };   // IEEE binary16 (numpy.float16)
struct alignas(2) bf16 { unsigned short bits; };  // bfloat16 (ml_dtypes.bfloat16)
struct alignas(8) c64 { float re, im; };          // numpy.complex64
struct alignas(16) c128 { double re, im; };       // numpy.complex128
struct alignas(1) boolean { unsigned char v; };   // numpy.bool_ (one byte, 0 or 1)

__device__ __forceinline__ float to_float(f16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
}
__device__ __forceinline__ f16 to_f16(float f) {
    f16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
    return h;
}
__device__ __forceinline__ float to_float(bf16 b) {
    return __uint_as_float(((unsigned int)b.bits) << 16);
}
__device__ __forceinline__ bf16 to_bf16(float f) {  // round to nearest even, quiet NaN kept NaN
    unsigned int u = __float_as_uint(f);
    bf16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        b.bits = (unsigned short)((u >> 16) | 0x0040u);
    } else {
        b.bits = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    return b;
}

// ---- the ops, one overload set each ----------------------------------------------------------

// Integer SUM/PROD in unsigned arithmetic (wraps like NumPy; no signed-overflow UB, no int promotion).
#define ADAPTCOLL_INT_ARITH(T, W)                                                           \
    __device__ __forceinline__ T op_sum(T a, T b) { return (T)((W)a + (W)b); }             \
    __device__ __forceinline__ T op_prod(T a, T b) { return (T)((W)a * (W)b); }            \
    __device__ __forceinline__ T op_max(T a, T b) { return a > b ? a : b; }                \
    __device__ __forceinline__ T op_min(T a, T b) { return a < b ? a : b; }                \
    __device__ __forceinline__ T op_land(T a, T b) { return (T)((a != 0) & (b != 0)); }    \
    __device__ __forceinline__ T op_lor(T a, T b) { return (T)((a != 0) | (b != 0)); }     \
    __device__ __forceinline__ T op_lxor(T a, T b) { return (T)((a != 0) ^ (b != 0)); }    \
    __device__ __forceinline__ T op_band(T a, T b) { return (T)(a & b); }                  \
    __device__ __forceinline__ T op_bor(T a, T b) { return (T)(a | b); }                   \
    __device__ __forceinline__ T op_bxor(T a, T b) { return (T)(a ^ b); }

ADAPTCOLL_INT_ARITH(signed char, unsigned int)
ADAPTCOLL_INT_ARITH(short, unsigned int)
ADAPTCOLL_INT_ARITH(int, unsigned int)
ADAPTCOLL_INT_ARITH(long long, unsigned long long)
ADAPTCOLL_INT_ARITH(unsigned char, unsigned int)
ADAPTCOLL_INT_ARITH(unsigned short, unsigned int)
ADAPTCOLL_INT_ARITH(unsigned int, unsigned int)
ADAPTCOLL_INT_ARITH(unsigned long long, unsigned long long)

__device__ __forceinline__ boolean make_bool(bool v) { boolean r; r.v = v ? 1 : 0; return r; }
__device__ __forceinline__ boolean op_land(boolean a, boolean b) { return make_bool(a.v && b.v); }
__device__ __forceinline__ boolean op_lor(boolean a, boolean b) { return make_bool(a.v || b.v); }
__device__ __forceinline__ boolean op_lxor(boolean a, boolean b) { return make_bool((a.v != 0) != (b.v != 0)); }
__device__ __forceinline__ boolean op_band(boolean a, boolean b) { boolean r; r.v = a.v & b.v; return r; }
__device__ __forceinline__ boolean op_bor(boolean a, boolean b) { boolean r; r.v = a.v | b.v; return r; }
__device__ __forceinline__ boolean op_bxor(boolean a, boolean b) { boolean r; r.v = a.v ^ b.v; return r; }

// float32 arithmetic and comparisons go through inline PTX: cupy.RawModule always compiles with
// -ftz=true, which would flush subnormals in plain C++ float code; NumPy (and MPI on the host) keeps
// them. The explicit .rn rounding also keeps ptxas from fusing products and sums into FMAs.
__device__ __forceinline__ float f32_add(float a, float b) { float r; asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float f32_sub(float a, float b) { float r; asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float f32_mul(float a, float b) { float r; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ bool f32_isnan(float a) { return (__float_as_uint(a) & 0x7fffffffu) > 0x7f800000u; }
__device__ __forceinline__ bool f32_ge(float a, float b) {
    unsigned int r;
    asm("{ .reg .pred p; setp.ge.f32 p, %1, %2; selp.u32 %0, 1, 0, p; }" : "=r"(r) : "f"(a), "f"(b));
    return r != 0;
}
// Whether numpy.maximum / numpy.minimum keep `a`: a NaN in `a` wins, then a NaN in `b`, then order.
// setp.ge is an ordered comparison (false when either operand is NaN), so a NaN in `b` needs no test
// of its own: one NaN test per element, not two (bfloat16 MAX/MIN at 256 MiB were at 89-90 % of copy).
__device__ __forceinline__ bool f32_keep_max(float a, float b) { return f32_ge(a, b) || f32_isnan(a); }
__device__ __forceinline__ bool f32_keep_min(float a, float b) { return f32_ge(b, a) || f32_isnan(a); }

// Floats: NaN-propagating MAX/MIN as numpy.maximum/minimum (a NaN in either operand wins).
__device__ __forceinline__ float op_sum(float a, float b) { return f32_add(a, b); }
__device__ __forceinline__ float op_prod(float a, float b) { return f32_mul(a, b); }
__device__ __forceinline__ float op_max(float a, float b) { return f32_keep_max(a, b) ? a : b; }
__device__ __forceinline__ float op_min(float a, float b) { return f32_keep_min(a, b) ? a : b; }
__device__ __forceinline__ double op_sum(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double op_prod(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double op_max(double a, double b) { return (a >= b || a != a) ? a : b; }
__device__ __forceinline__ double op_min(double a, double b) { return (a <= b || a != a) ? a : b; }

// float16 / bfloat16: compute in float32, round once (NumPy's float16 arithmetic does the same).
#define ADAPTCOLL_HALF_ARITH(T, ROUND)                                                                  \
    __device__ __forceinline__ T op_sum(T a, T b) { return ROUND(f32_add(to_float(a), to_float(b))); }  \
    __device__ __forceinline__ T op_prod(T a, T b) { return ROUND(f32_mul(to_float(a), to_float(b))); } \
    __device__ __forceinline__ T op_max(T a, T b) { return f32_keep_max(to_float(a), to_float(b)) ? a : b; } \
    __device__ __forceinline__ T op_min(T a, T b) { return f32_keep_min(to_float(a), to_float(b)) ? a : b; }

ADAPTCOLL_HALF_ARITH(f16, to_f16)
ADAPTCOLL_HALF_ARITH(bf16, to_bf16)

// Complex: SUM and PROD only (MPI defines no ordering on complex numbers); explicitly rounded steps,
// never fused into FMAs, to match NumPy's rounding.
__device__ __forceinline__ c64 op_sum(c64 a, c64 b) { c64 r; r.re = f32_add(a.re, b.re); r.im = f32_add(a.im, b.im); return r; }
__device__ __forceinline__ c64 op_prod(c64 a, c64 b) {
    c64 r;
    r.re = f32_sub(f32_mul(a.re, b.re), f32_mul(a.im, b.im));
    r.im = f32_add(f32_mul(a.re, b.im), f32_mul(a.im, b.re));
    return r;
}
__device__ __forceinline__ c128 op_sum(c128 a, c128 b) { c128 r; r.re = a.re + b.re; r.im = a.im + b.im; return r; }
__device__ __forceinline__ c128 op_prod(c128 a, c128 b) {
    c128 r;
    r.re = __dsub_rn(__dmul_rn(a.re, b.re), __dmul_rn(a.im, b.im));
    r.im = __dadd_rn(__dmul_rn(a.re, b.im), __dmul_rn(a.im, b.re));
    return r;
}

#define ADAPTCOLL_OP_FUNCTOR(NAME, FN) \
    struct NAME { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return FN(a, b); } };
ADAPTCOLL_OP_FUNCTOR(Sum, op_sum)
ADAPTCOLL_OP_FUNCTOR(Prod, op_prod)
ADAPTCOLL_OP_FUNCTOR(Max, op_max)
ADAPTCOLL_OP_FUNCTOR(Min, op_min)
ADAPTCOLL_OP_FUNCTOR(Land, op_land)
ADAPTCOLL_OP_FUNCTOR(Lor, op_lor)
ADAPTCOLL_OP_FUNCTOR(Lxor, op_lxor)
ADAPTCOLL_OP_FUNCTOR(Band, op_band)
ADAPTCOLL_OP_FUNCTOR(Bor, op_bor)
ADAPTCOLL_OP_FUNCTOR(Bxor, op_bxor)

// ---- the loop --------------------------------------------------------------------------------

template <typename T>
union Pack16 {  // 16 bytes seen as one vector load or as elements
    uint4 raw;
    T v[16 / sizeof(T)];
};

// Packs of 16 bytes each thread loads before it folds and stores them: several independent loads in
// flight per thread (the host sizes the grid for this, adaptcoll.backends.cupy_backend.PACKS_PER_THREAD),
// so a grid of fewer, fatter blocks still keeps enough bytes in flight to reach copy bandwidth.
#define ADAPTCOLL_PACKS_PER_THREAD 4

template <typename Op, typename T>
__device__ __forceinline__ void reduce_inplace(T* __restrict__ acc, const T* __restrict__ in, u64 n) {
    const Op op;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    constexpr u64 per_pack = 16 / sizeof(T);
    constexpr u64 unroll = ADAPTCOLL_PACKS_PER_THREAD;
    const u64 acc_addr = (u64)acc, in_addr = (u64)in;
    u64 head = n;  // scalar elements before the vector body (all of them if alignments differ)
    if (((acc_addr ^ in_addr) & 15) == 0 && (acc_addr % sizeof(T)) == 0) {
        u64 misaligned = (16 - (acc_addr & 15)) & 15;
        head = misaligned / sizeof(T);
        if (head > n) head = n;
    }
    for (u64 i = tid; i < head; i += stride) acc[i] = op(acc[i], in[i]);
    const u64 packs = (n - head) / per_pack;
    Pack16<T>* acc_packs = reinterpret_cast<Pack16<T>*>(acc + head);
    const uint4* in_packs = reinterpret_cast<const uint4*>(in + head);
    u64 p = tid;
    // Body: `unroll` packs per thread per pass, stride apart (a warp still reads contiguous bytes); all
    // loads are issued before the first fold.
    for (; p + (unroll - 1) * stride < packs; p += unroll * stride) {
        Pack16<T> a[unroll], b[unroll];
#pragma unroll
        for (u64 u = 0; u < unroll; ++u) {
            a[u].raw = acc_packs[p + u * stride].raw;
            b[u].raw = __ldg(in_packs + p + u * stride);
        }
#pragma unroll
        for (u64 u = 0; u < unroll; ++u) {
#pragma unroll
            for (u64 k = 0; k < per_pack; ++k) a[u].v[k] = op(a[u].v[k], b[u].v[k]);
            acc_packs[p + u * stride].raw = a[u].raw;
        }
    }
    for (; p < packs; p += stride) {  // the last partial pass: one pack at a time
        Pack16<T> a, b;
        a.raw = acc_packs[p].raw;
        b.raw = __ldg(in_packs + p);
#pragma unroll
        for (u64 k = 0; k < per_pack; ++k) a.v[k] = op(a.v[k], b.v[k]);
        acc_packs[p].raw = a.raw;
    }
    for (u64 i = head + packs * per_pack + tid; i < n; i += stride) acc[i] = op(acc[i], in[i]);
}

// ---- the exported kernels --------------------------------------------------------------------

#define ADAPTCOLL_KERNEL(op, Functor, dtype, T)                                                  \
    extern "C" __global__ void adaptcoll_##op##_##dtype(T* acc, const T* in, unsigned long long n) { \
        reduce_inplace<Functor, T>(acc, in, n);                                                  \
    }

// Every op on a type (integers: all ten), arithmetic-only (floats), sum/prod (complex), logical and
// bitwise (bool) -- the table mirrors MPI's op/type rules and adaptcoll.backends.cupy_backend.
#define ADAPTCOLL_ALL_OPS(dtype, T)                                                              \
    ADAPTCOLL_KERNEL(sum, Sum, dtype, T) ADAPTCOLL_KERNEL(prod, Prod, dtype, T)                  \
    ADAPTCOLL_KERNEL(max, Max, dtype, T) ADAPTCOLL_KERNEL(min, Min, dtype, T)                    \
    ADAPTCOLL_KERNEL(land, Land, dtype, T) ADAPTCOLL_KERNEL(lor, Lor, dtype, T)                  \
    ADAPTCOLL_KERNEL(lxor, Lxor, dtype, T) ADAPTCOLL_KERNEL(band, Band, dtype, T)                \
    ADAPTCOLL_KERNEL(bor, Bor, dtype, T) ADAPTCOLL_KERNEL(bxor, Bxor, dtype, T)
#define ADAPTCOLL_ARITH_OPS(dtype, T)                                                            \
    ADAPTCOLL_KERNEL(sum, Sum, dtype, T) ADAPTCOLL_KERNEL(prod, Prod, dtype, T)                  \
    ADAPTCOLL_KERNEL(max, Max, dtype, T) ADAPTCOLL_KERNEL(min, Min, dtype, T)
#define ADAPTCOLL_SUM_PROD(dtype, T) \
    ADAPTCOLL_KERNEL(sum, Sum, dtype, T) ADAPTCOLL_KERNEL(prod, Prod, dtype, T)
#define ADAPTCOLL_LOGICAL_BITWISE(dtype, T)                                                      \
    ADAPTCOLL_KERNEL(land, Land, dtype, T) ADAPTCOLL_KERNEL(lor, Lor, dtype, T)                  \
    ADAPTCOLL_KERNEL(lxor, Lxor, dtype, T) ADAPTCOLL_KERNEL(band, Band, dtype, T)                \
    ADAPTCOLL_KERNEL(bor, Bor, dtype, T) ADAPTCOLL_KERNEL(bxor, Bxor, dtype, T)

ADAPTCOLL_ALL_OPS(int8, signed char)
ADAPTCOLL_ALL_OPS(int16, short)
ADAPTCOLL_ALL_OPS(int32, int)
ADAPTCOLL_ALL_OPS(int64, long long)
ADAPTCOLL_ALL_OPS(uint8, unsigned char)
ADAPTCOLL_ALL_OPS(uint16, unsigned short)
ADAPTCOLL_ALL_OPS(uint32, unsigned int)
ADAPTCOLL_ALL_OPS(uint64, unsigned long long)
ADAPTCOLL_ARITH_OPS(float16, f16)
ADAPTCOLL_ARITH_OPS(bfloat16, bf16)
ADAPTCOLL_ARITH_OPS(float32, float)
ADAPTCOLL_ARITH_OPS(float64, double)
ADAPTCOLL_SUM_PROD(complex64, c64)
ADAPTCOLL_SUM_PROD(complex128, c128)
ADAPTCOLL_LOGICAL_BITWISE(bool, boolean)

// ---- gathering pieces into a bucket and scattering them back (grouped Allreduce) -------------
//
// A grouped Allreduce packs many small device arrays into one bucket. `table` holds 3 u64 per piece:
// the array's address, the piece's byte offset in `bucket`, its byte count (at most a few KiB to
// 64 KiB: adaptcoll splits big arrays into several pieces, so the work spreads over the SMs). One
// block per piece (grid-stride over the pieces); the block's threads move 16 bytes per load/store
// where the two addresses share their alignment mod 16 (after a short byte head), else 8, 4 or 1
// (read-only loads: a piece's source is not written while the kernel runs; global stores even
// through the table's generic addresses).
//     void adaptcoll_gather_pieces(unsigned char* bucket, const u64* table, u64 pieces)   // arrays -> bucket
//     void adaptcoll_scatter_pieces(unsigned char* bucket, const u64* table, u64 pieces)  // bucket -> arrays

template <typename W>
__device__ __forceinline__ void copy_words(unsigned char* dst, const unsigned char* src, u64 n) {
    const u64 mask = sizeof(W) - 1;
    u64 head = (sizeof(W) - ((u64)dst & mask)) & mask;
    if (head > n) head = n;
    for (u64 i = threadIdx.x; i < head; i += blockDim.x) __stcg(dst + i, __ldg(src + i));
    const u64 words = (n - head) / sizeof(W);
    W* d = reinterpret_cast<W*>(dst + head);
    const W* s = reinterpret_cast<const W*>(src + head);
    for (u64 i = threadIdx.x; i < words; i += blockDim.x) __stcg(d + i, __ldg(s + i));
    for (u64 i = head + words * sizeof(W) + threadIdx.x; i < n; i += blockDim.x) __stcg(dst + i, __ldg(src + i));
}

__device__ __forceinline__ void copy_piece(unsigned char* dst, const unsigned char* src, u64 n) {
    const u64 skew = ((u64)dst ^ (u64)src) & 15;
    if (skew == 0) {
        copy_words<uint4>(dst, src, n);
    } else if ((skew & 7) == 0) {
        copy_words<unsigned long long>(dst, src, n);
    } else if ((skew & 3) == 0) {
        copy_words<unsigned int>(dst, src, n);
    } else {
        copy_words<unsigned char>(dst, src, n);
    }
}

extern "C" __global__ void adaptcoll_gather_pieces(unsigned char* bucket, const u64* table, unsigned long long pieces) {
    for (u64 p = blockIdx.x; p < pieces; p += gridDim.x) {
        copy_piece(bucket + table[3 * p + 1], reinterpret_cast<const unsigned char*>(table[3 * p]), table[3 * p + 2]);
    }
}

extern "C" __global__ void adaptcoll_scatter_pieces(unsigned char* bucket, const u64* table, unsigned long long pieces) {
    for (u64 p = blockIdx.x; p < pieces; p += gridDim.x) {
        copy_piece(reinterpret_cast<unsigned char*>(table[3 * p]), bucket + table[3 * p + 1], table[3 * p + 2]);
    }
}
