/*
 * embedding.cu: token embedding lookup and its deterministic backward (see embedding.cuh).
 *   forward:  out[n,:] (N,D) fp32 = table[ids[n], :]   table (V,D) dtype dt, ids (N) int32      (=)
 *             (T5 does not scale by sqrt(D)). An id outside [0,V) is the data pipeline's bug; the
 *             forward does not know V and reads what the caller gives it.
 *   backward: dtable (V,D) fp32 += for each n: dout[n,:] (N,D) fp32                             (+=)
 * Deterministic backward without float atomics: a stable radix sort (cub) of (id, n) pairs puts the
 * rows of one id next to each other in increasing n; the first position of every run owns that id
 * and sums its run's rows (split over 8 warps per 32-column tile, partials added in a fixed order), then
 * adds the sum to dtable once. Ids outside [0,V) are skipped.
 * scratch (embedding_backward_scratch_bytes(N)): sorted ids (N), positions in/out (2N), cub's temp.
 */
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"
#include "embedding.cuh"

// ---- CUDA kernels

template <typename T>
__global__ void embedding_forward_kernel1(float* out, const int* ids, const T* table, int N, int D, bool vec) {
    // one chunk of 8 columns per thread; grid-stride over (n, chunk)
    const int chunks = CEIL_DIV(D, EW_CHUNK);
    const size_t total = (size_t)N * chunks;
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < total; c += (size_t)gridDim.x * blockDim.x) {
        const int n = (int)(c / chunks);
        const int i0 = (int)(c % chunks) * EW_CHUNK;
        float v[EW_CHUNK];
        load_chunk(table + (size_t)ids[n] * D, i0, D, vec, v);
        store_chunk(out + (size_t)n * D, i0, D, vec, v);
    }
}

__global__ void embedding_iota_kernel1(int* pos, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) pos[i] = i;
}

// grid (N, ceil(D/32)), block 32 x EMB_SLICES: block (i, c) works only when sorted position i starts a
// run of equal ids; it owns columns [32c, 32c+32) of that id. Warp w sums the run's rows j = i+w,
// i+w+EMB_SLICES, ... (coalesced 128-byte rows), then warp 0 adds the EMB_SLICES partials in order.
// The assignment depends only on the run length: deterministic, and a run of thousands of pad rows
// is spread over EMB_SLICES warps per column tile instead of one thread.
#define EMB_SLICES 8
template <typename G>
__global__ void embedding_backward_kernel2(G* dtable, const float* dout, const int* sorted_ids, const int* pos, int N,
                                           int D, int V) {
    __shared__ float part[EMB_SLICES][32];
    const int i = blockIdx.x;
    const int id = sorted_ids[i];
    if ((i > 0 && sorted_ids[i - 1] == id) || id < 0 || id >= V) return;  // uniform across the block
    // end of the run: first position after i with a larger id (binary search, ids sorted ascending)
    int lo = i + 1, hi = N;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (sorted_ids[mid] == id) lo = mid + 1;
        else hi = mid;
    }
    const int end = lo;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int d = blockIdx.y * 32 + lane;
    float s = 0.0f;
    if (d < D)
        for (int j = i + w; j < end; j += EMB_SLICES) s += dout[(size_t)pos[j] * D + d];
    part[w][lane] = s;
    __syncthreads();
    if (w == 0 && d < D) {
        float t = 0.0f;
        for (int k = 0; k < EMB_SLICES; k++) t += part[k][lane];
        G* o = dtable + (size_t)id * D + d;
        *o = from_f32<G>(to_f32<G>(*o) + t);  // one rounding per (id, column) and step
    }
}

// ---- kernel launchers

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static size_t embedding_cub_temp_bytes(int N) {
    size_t temp = 0;
    // no usable device (the memory planner on a CPU machine): a bound instead of cub's device-tuned size
    // (its double buffers for keys and values, the per-tile lookback, 1 MiB for the digit histograms)
    // (asked once: this runs inside CUDA graph captures too, where a context-creating call such as cudaFree(0)
    // invalidates the capture)
    static int have_device = -1;
    if (have_device < 0) {
        int n = 0;
        have_device = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
        (void)cudaGetLastError();
    }
    if (!have_device) return 4 * align256((size_t)N * sizeof(int)) + ((size_t)1 << 20);
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, (const int*)nullptr, (int*)nullptr, (const int*)nullptr,
                                               (int*)nullptr, N, 0, 32));
    return temp;
}

extern "C" size_t embedding_backward_scratch_bytes(int N) {
    if (N <= 0) return 256;
    return 3 * align256((size_t)N * sizeof(int)) + align256(embedding_cub_temp_bytes(N));
}

template <typename T>
static void embedding_forward_t(float* out, const int* ids, const void* table, int N, int D, cudaStream_t stream) {
    const bool vec = D % EW_CHUNK == 0 && is_aligned16(out) && is_aligned16(table);
    const size_t total = (size_t)N * CEIL_DIV(D, EW_CHUNK);
    embedding_forward_kernel1<T><<<grid_1d(total, 256), 256, 0, stream>>>(out, ids, (const T*)table, N, D, vec);
}

extern "C" void embedding_forward(float* out, const int* ids, const void* table, DType dt, int N, int D,
                                  cudaStream_t stream) {
    if (N <= 0 || D <= 0) return;
    DTYPE_DISPATCH(dt, embedding_forward_t, out, ids, table, N, D, stream);
    CUDA_LAUNCH_CHECK();
}

template <typename G>
static void embedding_backward_t(void* dtable, const float* dout, const int* sorted_ids, const int* pos, int N, int D,
                                 int V, cudaStream_t stream) {
    embedding_backward_kernel2<G><<<dim3(N, CEIL_DIV(D, 32)), 32 * EMB_SLICES, 0, stream>>>((G*)dtable, dout, sorted_ids,
                                                                                            pos, N, D, V);
}

extern "C" void embedding_backward(void* dtable, DType dt_dtable, const float* dout, const int* ids, int N, int D, int V,
                                   void* scratch, cudaStream_t stream) {
    if (N <= 0 || D <= 0) return;
    char* s = (char*)scratch;
    int* sorted_ids = (int*)s;
    int* pos_in = (int*)(s + align256((size_t)N * sizeof(int)));
    int* pos_out = (int*)(s + 2 * align256((size_t)N * sizeof(int)));
    void* temp = s + 3 * align256((size_t)N * sizeof(int));
    size_t temp_bytes = embedding_cub_temp_bytes(N);  // host-side query, no device work
    // all 32 key bits: an out-of-range id must not split the run of a valid one (stable sort, so equal
    // ids keep increasing n)
    embedding_iota_kernel1<<<CEIL_DIV(N, 256), 256, 0, stream>>>(pos_in, N);
    CUDA_LAUNCH_CHECK();
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, ids, sorted_ids, pos_in, pos_out, N, 0, 32,
                                               stream));
    DTYPE_DISPATCH(dt_dtable, embedding_backward_t, dtable, dout, sorted_ids, pos_out, N, D, V, stream);
    CUDA_LAUNCH_CHECK();
}
