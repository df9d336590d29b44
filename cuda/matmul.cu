/*
 * matmul.cu: every GEMM of the model through cuBLASLt (see matmul.cuh for the row-major contract).
 *   D (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * D, fp32 accumulation (CUBLAS_COMPUTE_32F, also
 *   for fp32 inputs: no TF32, so fp32 runs match PyTorch with TF32 off), alpha/beta fp32. matmul_set_tf32(true)
 *   (HF's --tf32, torch.backends.cuda.matmul.allow_tf32) gives fp32-input GEMMs CUBLAS_COMPUTE_32F_FAST_TF32:
 *   inputs rounded to TF32 (10-bit mantissa) on the tensor cores, fp32 accumulation; 16-bit GEMMs unchanged.
 *   A, B: f32, f16 or bf16 (the same); D: that dtype or f32. beta = 1 is the `+=` of gradients.
 *
 * Row-major onto cuBLASLt's column-major: a row-major (r,c) matrix with row length ld is the same
 * memory as a column-major (c,r) matrix with leading dimension ld. So the row-major product
 * D = op(A) op(B) is computed as the column-major product D^T (N,M) = op(B)^T op(A)^T:
 *   cuBLASLt "A" = our B: stored col-major (N,K) ld N when !trans_b (no transpose needed),
 *                         or col-major (K,N) ld K when trans_b (cuBLASLt transposes it: OP_T);
 *   cuBLASLt "B" = our A: stored col-major (K,M) ld K when !trans_a (OP_N), or (M,K) ld M (OP_T);
 *   cuBLASLt "C"/"D" = our D: col-major (N,M) ld N.
 *   m = N, n = M, k = K for cuBLASLt.
 * Leading dimensions: the row length of the stored row-major matrix (lda/ldb/ldd, 0 = packed) is the
 * column-major ld cuBLASLt takes, whichever way the operand is transposed.
 * Batched: strided batch with the element strides of the descriptor (0 broadcasts an operand), or
 * (matmul_batched_ptr) cuBLASLt's pointer-array batch mode on every operand: device arrays of one pointer
 * per matrix, read by the kernel at run time (e.g. the heads of a (B*T, H*Dk) tensor, which no single
 * batch stride reaches).
 *
 * Descriptors, layouts and the heuristic's algorithm are created once per distinct shape key
 * (every GemmDesc field but alpha, with beta reduced to "zero or not", plus the operands' alignment)
 * and kept in a small cache (linear scan over 64-bit hashes; when full, the oldest entry is
 * recycled). The heuristic is restricted to split-K reductions in the compute type (fp32 in the
 * workspace) or none, so a GEMM never reduces partial sums in fp16 or through atomics in D; the
 * same algorithm is reused every step, so results are bit-reproducible.
 * Base pointers must be 16-byte aligned (checked, naming the operand); leading dimensions and batch
 * strides may be odd: the alignment they give is passed to the heuristic, which then picks a kernel
 * that handles it (slower: keep leading dimensions multiples of 8 elements in the model).
 * The workspace (32 MiB) and the handle are created by matmul_init (or at the first matmul call).
 * One device per process (one rank per GPU).
 */
#include <string.h>

#include "../src/base/oom.h"
#include "common.cuh"
#include "elementwise.cuh"
#include "matmul.cuh"

// ---- cache of cuBLASLt descriptors

typedef struct {
    int M, N, K;
    int trans_a, trans_b;
    int dt_ab, dt_d;
    int batch;
    int64_t stride_a, stride_b, stride_d;
    int lda, ldb, ldd;  // effective leading dimensions (elements)
    int ptr_array;      // 1: CUBLASLT_BATCH_MODE_POINTER_ARRAY on A, B, C, D
    int beta_nonzero;
    int epilogue;
    int tf32;  // fp32 inputs on TF32 tensor cores (matmul_set_tf32); 0 for 16-bit inputs
    int align_a, align_b, align_d;  // bytes, power of two in [2, 256]
} MatmulKey;

typedef struct {
    uint64_t hash;
    MatmulKey key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;  // cuBLASLt's A (our B), B (our A), C = D
    cublasLtMatmulAlgo_t algo;
    bool used;
} MatmulPlan;

#define MATMUL_CACHE_SIZE 512
#define MATMUL_WORKSPACE_BYTES (32u << 20)

static cublasLtHandle_t matmul_handle = NULL;
static void* matmul_workspace = NULL;  // MATMUL_WORKSPACE_BYTES of device memory
static MatmulPlan matmul_cache[MATMUL_CACHE_SIZE];
static int matmul_cache_next = 0;  // next slot to fill (ring: the oldest entry is recycled)
static bool matmul_tf32 = false;   // matmul_set_tf32

static cudaDataType_t matmul_cuda_type(DType t) {
    switch (t) {
        case DT_F32: return CUDA_R_32F;
        case DT_F16: return CUDA_R_16F;
        case DT_BF16: return CUDA_R_16BF;
    }
    t5_die(T5_EXIT_FAILURE, "matmul: unknown dtype %d", (int)t);
}

static uint64_t matmul_hash(const MatmulKey* k) {
    const unsigned char* p = (const unsigned char*)k;
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

// largest power of two <= 256 dividing both the address and the batch stride in bytes
static int matmul_alignment(const void* p, int64_t stride_elems, size_t es, int batch) {
    int a = 256;
    while (a > 1 && ((uintptr_t)p % (uintptr_t)a) != 0) a >>= 1;
    if (batch > 1 && stride_elems != 0)
        while (a > 1 && ((uint64_t)(stride_elems * (int64_t)es) % (uint64_t)a) != 0) a >>= 1;
    return a;
}

static void matmul_plan_destroy(MatmulPlan* p) {
    if (!p->used) return;
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->ld));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->op));
    p->used = false;
}

static cublasLtMatrixLayout_t matmul_layout(DType dt, int rows, int cols, int ld, int batch, int64_t stride,
                                            bool ptr_array) {
    cublasLtMatrixLayout_t l;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, matmul_cuda_type(dt), (uint64_t)rows, (uint64_t)cols, (int64_t)ld));
    if (ptr_array) {
        const uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
        const int32_t bc = batch;
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode, sizeof mode));
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
    } else if (batch > 1) {
        int32_t bc = batch;
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
        CUBLAS_CHECK(
            cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
    return l;
}

// false (nothing kept) when the heuristic has no algorithm
static bool matmul_plan_create(MatmulPlan* p, const MatmulKey* k, uint64_t hash) {
    p->hash = hash;
    p->key = *k;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                          CUDA_R_32F));
    // column-major view: cuBLASLt A = our B, cuBLASLt B = our A (see the file comment)
    const cublasOperation_t opa = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    const cublasLtEpilogue_t epi = k->epilogue == GEMM_EPI_RELU ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    const DType dab = (DType)k->dt_ab, dd = (DType)k->dt_d;
    const bool pa = k->ptr_array != 0;
    p->la = k->trans_b ? matmul_layout(dab, k->K, k->N, k->ldb, k->batch, k->stride_b, pa)
                       : matmul_layout(dab, k->N, k->K, k->ldb, k->batch, k->stride_b, pa);
    p->lb = k->trans_a ? matmul_layout(dab, k->M, k->K, k->lda, k->batch, k->stride_a, pa)
                       : matmul_layout(dab, k->K, k->M, k->lda, k->batch, k->stride_a, pa);
    p->ld = matmul_layout(dd, k->N, k->M, k->ldd, k->batch, k->stride_d, pa);

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = MATMUL_WORKSPACE_BYTES;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const uint32_t al_a = (uint32_t)k->align_b, al_b = (uint32_t)k->align_a, al_d = (uint32_t)k->align_d;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
    uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;  // or none: fp32 split-K partials, no atomics in D
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    // (a heuristic that refuses the layouts outright, e.g. a batch mode it does not know, is "no algorithm" too)
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(matmul_handle, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (st != CUBLAS_STATUS_SUCCESS) found = 0;
    p->used = true;  // (so that matmul_plan_destroy frees the descriptors)
    if (found == 0) {
        matmul_plan_destroy(p);
        return false;
    }
    p->algo = res.algo;
    return true;
}

static void matmul_die_no_algo(const MatmulKey* k) {
    t5_die(T5_EXIT_FAILURE,
           "matmul: cuBLASLt has no algorithm for M=%d N=%d K=%d trans_a=%d trans_b=%d A/B %s D %s batch=%d%s "
           "ld %d/%d/%d (alignments A %d B %d D %d bytes)",
           k->M, k->N, k->K, k->trans_a, k->trans_b, dtype_name((DType)k->dt_ab), dtype_name((DType)k->dt_d),
           k->batch, k->ptr_array ? " (pointer arrays)" : "", k->lda, k->ldb, k->ldd, k->align_a, k->align_b,
           k->align_d);
}

// the cached plan of key k, created on first use; NULL when cuBLASLt has no algorithm for it
static const MatmulPlan* matmul_plan_get(const MatmulKey* k) {
    const uint64_t h = matmul_hash(k);
    for (int i = 0; i < MATMUL_CACHE_SIZE; i++) {
        const MatmulPlan* p = &matmul_cache[i];
        if (p->used && p->hash == h && memcmp(&p->key, k, sizeof *k) == 0) return p;
    }
    MatmulPlan* p = &matmul_cache[matmul_cache_next];
    matmul_plan_destroy(p);  // safe while earlier launches run: cuBLASLt reads descriptors at enqueue time
    if (!matmul_plan_create(p, k, h)) return NULL;
    matmul_cache_next = (matmul_cache_next + 1) % MATMUL_CACHE_SIZE;
    return p;
}

// ---- public API

extern "C" void matmul_set_tf32(bool on) { matmul_tf32 = on; }

extern "C" void matmul_init(void) {
    if (matmul_handle) return;
    CUBLAS_CHECK(cublasLtCreate(&matmul_handle));
    CUDA_ALLOC_CHECK(cudaMalloc(&matmul_workspace, MATMUL_WORKSPACE_BYTES), "the cuBLASLt workspace",
                     MATMUL_WORKSPACE_BYTES);
    memset(matmul_cache, 0, sizeof matmul_cache);
    matmul_cache_next = 0;
}

extern "C" void matmul_shutdown(void) {
    if (!matmul_handle) return;
    for (int i = 0; i < MATMUL_CACHE_SIZE; i++) matmul_plan_destroy(&matmul_cache[i]);
    CUDA_CHECK(cudaFree(matmul_workspace));
    CUBLAS_CHECK(cublasLtDestroy(matmul_handle));
    matmul_workspace = NULL;
    matmul_handle = NULL;
}

static void matmul_check_ptr(const void* p, const char* what, const GemmDesc* g) {
    if (p == NULL)
        t5_die(T5_EXIT_FAILURE, "matmul: operand %s is NULL (M=%d N=%d K=%d)", what, g->M, g->N, g->K);
    if (((uintptr_t)p & 15u) != 0)
        t5_die_hint(T5_EXIT_FAILURE, "allocate GEMM operands at 16-byte aligned offsets (multiples of 8 fp16 elements)",
                    "matmul: operand %s at %p is not 16-byte aligned (M=%d N=%d K=%d)", what, p, g->M, g->N, g->K);
}

static void matmul_check_desc(const GemmDesc* g) {
    if (g->dt_d != g->dt_ab && g->dt_d != DT_F32)
        t5_die(T5_EXIT_FAILURE, "matmul: D dtype %s must equal the A/B dtype %s or be fp32", dtype_name(g->dt_d),
               dtype_name(g->dt_ab));
    if (g->epilogue == GEMM_EPI_RELU && g->beta != 0.0f)
        t5_die(T5_EXIT_FAILURE, "matmul: the RELU epilogue needs beta == 0 (got %g)", g->beta);
    // the stored row lengths (see matmul.cuh); an explicit one must hold a row
    const int la = g->trans_a ? g->M : g->K, lb = g->trans_b ? g->K : g->N;
    if ((g->lda && g->lda < la) || (g->ldb && g->ldb < lb) || (g->ldd && g->ldd < g->N))
        t5_die(T5_EXIT_FAILURE, "matmul: leading dimensions %d/%d/%d shorter than the rows (%d/%d/%d)", g->lda, g->ldb,
               g->ldd, la, lb, g->N);
}

// the cache key of g (alignments filled in by the caller)
static MatmulKey matmul_key_make(const GemmDesc* g, bool ptr_array) {
    MatmulKey k;
    memset(&k, 0, sizeof k);  // padding bytes take part in the hash and memcmp
    k.M = g->M;
    k.N = g->N;
    k.K = g->K;
    k.trans_a = g->trans_a;
    k.trans_b = g->trans_b;
    k.dt_ab = g->dt_ab;
    k.dt_d = g->dt_d;
    k.batch = g->batch;
    if (g->batch > 1 && !ptr_array) {
        k.stride_a = g->stride_a;
        k.stride_b = g->stride_b;
        k.stride_d = g->stride_d;
    }
    k.lda = g->lda ? g->lda : (g->trans_a ? g->M : g->K);
    k.ldb = g->ldb ? g->ldb : (g->trans_b ? g->K : g->N);
    k.ldd = g->ldd ? g->ldd : g->N;
    k.ptr_array = ptr_array;
    k.beta_nonzero = g->beta != 0.0f;
    k.epilogue = g->epilogue;
    k.tf32 = matmul_tf32 && g->dt_ab == DT_F32;
    return k;
}

// an explicit leading dimension lowers the alignment of every row after the first
static int matmul_alignment_ld(int align, int ld_explicit, size_t es) {
    if (ld_explicit)
        while (align > 1 && ((uint64_t)ld_explicit * es) % (uint64_t)align != 0) align >>= 1;
    return align;
}

// a caller's alignment promise, as a power of two in [1, 256]
static int matmul_alignment_given(int align) {
    int a = 256;
    while (a > 1 && (align <= 0 || align % a != 0)) a >>= 1;
    return a;
}

extern "C" void matmul(const GemmDesc* g, void* d, const void* a, const void* b, cudaStream_t stream) {
    if (g->M <= 0 || g->N <= 0 || g->batch <= 0) return;
    matmul_check_desc(g);
    if (g->K <= 0) {  // empty reduction: D = beta * D
        // (contiguous batches assumed here: stride_d == M*N or batch == 1)
        const size_t n = (size_t)g->M * g->N * g->batch;
        if (g->beta == 0.0f) fill(d, g->dt_d, n, 0.0f, stream);
        else if (g->beta != 1.0f) scale_inplace(d, g->dt_d, n, g->beta, stream);
        return;
    }
    matmul_check_ptr(a, "A", g);
    matmul_check_ptr(b, "B", g);
    matmul_check_ptr(d, "D", g);
    if (!matmul_handle) matmul_init();

    MatmulKey k = matmul_key_make(g, false);
    const size_t es = dtype_size(g->dt_ab), esd = dtype_size(g->dt_d);
    k.align_a = matmul_alignment_ld(matmul_alignment(a, k.stride_a, es, g->batch), g->lda, es);
    k.align_b = matmul_alignment_ld(matmul_alignment(b, k.stride_b, es, g->batch), g->ldb, es);
    k.align_d = matmul_alignment_ld(matmul_alignment(d, k.stride_d, esd, g->batch), g->ldd, esd);
    const MatmulPlan* p = matmul_plan_get(&k);
    if (!p) matmul_die_no_algo(&k);
    const float alpha = g->alpha, beta = g->beta;
    CUBLAS_CHECK(cublasLtMatmul(matmul_handle, p->op, &alpha, b, p->la, a, p->lb, &beta, d, p->ld, d, p->ld, &p->algo,
                                matmul_workspace, MATMUL_WORKSPACE_BYTES, stream));
    CUDA_LAUNCH_CHECK();
}

static MatmulKey matmul_key_ptr(const GemmDesc* g, int align_a, int align_b, int align_d) {
    matmul_check_desc(g);
    if (g->K <= 0)
        t5_die(T5_EXIT_FAILURE, "matmul_batched_ptr: empty reduction (K=%d) is not supported", g->K);
    MatmulKey k = matmul_key_make(g, true);
    const size_t es = dtype_size(g->dt_ab), esd = dtype_size(g->dt_d);
    k.align_a = matmul_alignment_ld(matmul_alignment_given(align_a), g->lda, es);
    k.align_b = matmul_alignment_ld(matmul_alignment_given(align_b), g->ldb, es);
    k.align_d = matmul_alignment_ld(matmul_alignment_given(align_d), g->ldd, esd);
    return k;
}

extern "C" bool matmul_batched_ptr_supported(const GemmDesc* g, int align_a, int align_b, int align_d) {
    if (g->M <= 0 || g->N <= 0 || g->batch <= 0) return true;
    if (!matmul_handle) matmul_init();
    const MatmulKey k = matmul_key_ptr(g, align_a, align_b, align_d);
    return matmul_plan_get(&k) != NULL;
}

extern "C" void matmul_batched_ptr(const GemmDesc* g, void* const* d, const void* const* a, const void* const* b,
                                   int align_a, int align_b, int align_d, cudaStream_t stream) {
    if (g->M <= 0 || g->N <= 0 || g->batch <= 0) return;
    matmul_check_ptr(a, "A (pointer array)", g);
    matmul_check_ptr(b, "B (pointer array)", g);
    matmul_check_ptr(d, "D (pointer array)", g);
    if (!matmul_handle) matmul_init();
    const MatmulKey k = matmul_key_ptr(g, align_a, align_b, align_d);
    const MatmulPlan* p = matmul_plan_get(&k);
    if (!p) matmul_die_no_algo(&k);
    const float alpha = g->alpha, beta = g->beta;
    // pointer-array mode: the operand "pointers" are the device arrays themselves
    void* dv = (void*)d;
    CUBLAS_CHECK(cublasLtMatmul(matmul_handle, p->op, &alpha, (const void*)b, p->la, (const void*)a, p->lb, &beta, dv,
                                p->ld, dv, p->ld, &p->algo, matmul_workspace, MATMUL_WORKSPACE_BYTES, stream));
    CUDA_LAUNCH_CHECK();
}

extern "C" void linear_forward(void* out, DType dt_out, const void* inp, const void* w, DType dt, int M, int N, int K,
                               cudaStream_t stream) {
    GemmDesc g;
    memset(&g, 0, sizeof g);
    g.M = M;
    g.N = N;
    g.K = K;
    g.trans_a = false;
    g.trans_b = true;  // W (N,K)
    g.dt_ab = dt;
    g.dt_d = dt_out;
    g.batch = 1;
    g.alpha = 1.0f;
    g.beta = 0.0f;
    g.epilogue = GEMM_EPI_NONE;
    matmul(&g, out, inp, w, stream);
}

extern "C" void linear_backward(void* dinp, DType dt_dinp, bool accumulate_dinp, void* dw, DType dt_dw,
                                bool accumulate_dw, const void* dout, const void* inp, const void* w, DType dt, int M,
                                int N, int K, cudaStream_t stream) {
    GemmDesc g;
    memset(&g, 0, sizeof g);
    g.dt_ab = dt;
    g.batch = 1;
    g.alpha = 1.0f;
    g.epilogue = GEMM_EPI_NONE;
    if (dinp) {  // dinp (M,K) = dout (M,N) @ W (N,K)
        g.M = M;
        g.N = K;
        g.K = N;
        g.trans_a = false;
        g.trans_b = false;
        g.dt_d = dt_dinp;
        g.beta = accumulate_dinp ? 1.0f : 0.0f;
        matmul(&g, dinp, dout, w, stream);
    }
    if (dw) {  // dw (N,K) (=|+=) dout^T (N,M) @ inp (M,K); dout is stored (M,N) = op^T
        g.M = N;
        g.N = K;
        g.K = M;
        g.trans_a = true;
        g.trans_b = false;
        g.dt_d = dt_dw;
        g.beta = accumulate_dw ? 1.0f : 0.0f;
        matmul(&g, dw, dout, inp, stream);
    }
}
