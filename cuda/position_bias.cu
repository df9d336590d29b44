/*
 * position_bias.cu: T5's bucketed relative position bias (see position_bias.cuh).
 *   forward:  bias[h,q,k] (H,Tq,Tk) fp32 = table[bucket(rel), h],  rel = k - (q + q_offset),
 *             bucket(rel) = buckets[rel + rel_offset] (host-computed HF table, device int32),
 *             table (NB,H) dtype dt.                                                          (=)
 *   backward: dtable[nb,h] (NB,H) G (=|+=) sum of dbias[h,q,k] over the (q,k) whose bucket is nb, G the
 *             gradient dtype (fp32/fp16/bf16); = for the first contribution of a step, += when accumulate
 * The backward is deterministic without atomics: the bucket depends on the diagonal rel only, so
 * one block per (nb,h) walks the diagonals rel in increasing order whose bucket is nb; each thread
 * sums a fixed subset of every diagonal's elements, then one block reduction (fixed tree order).
 * Every diagonal belongs to exactly one bucket, so dbias is read once overall.
 */
#include "common.cuh"
#include "position_bias.cuh"

// ---- CUDA kernels

template <typename T>
__global__ void position_bias_forward_kernel1(float* bias, const T* table, const int* buckets, int rel_offset, int H,
                                              int Tq, int Tk, int q_offset) {
    const size_t n = (size_t)H * Tq * Tk;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int k = (int)(i % Tk);
        const int q = (int)((i / Tk) % Tq);
        const int h = (int)(i / ((size_t)Tk * Tq));
        const int nb = buckets[k - (q + q_offset) + rel_offset];
        bias[i] = to_f32(table[(size_t)nb * H + h]);
    }
}

// grid (NB, H), block 256; dynamic smem: the bucket ids of rel_lo..rel_hi when they fit (use_smem)
template <typename G>
__global__ void position_bias_backward_kernel1(G* dtable, const float* dbias, const int* buckets, int rel_offset,
                                               int H, int Tq, int Tk, int q_offset, bool use_smem, bool accumulate) {
    __shared__ float red[32];
    extern __shared__ int bsh[];  // (rel_hi - rel_lo + 1) bucket ids
    const int nb = blockIdx.x, h = blockIdx.y;
    const float* d = dbias + (size_t)h * Tq * Tk;
    const int rel_lo = -(Tq - 1 + q_offset), rel_hi = Tk - 1 - q_offset;
    if (use_smem) {  // one coalesced read instead of a global load per rel in the serial loop below
        for (int r = rel_lo + (int)threadIdx.x; r <= rel_hi; r += blockDim.x) bsh[r - rel_lo] = buckets[r + rel_offset];
        __syncthreads();
    }
    float acc = 0.0f;
    for (int rel = rel_lo; rel <= rel_hi; rel++) {
        const int b = use_smem ? bsh[rel - rel_lo] : buckets[rel + rel_offset];
        if (b != nb) continue;  // uniform across the block
        // diagonal k = q + q_offset + rel: q from max(0, -(q_offset+rel)) to min(Tq-1, Tk-1-q_offset-rel)
        const int q0 = T5_MAX(0, -(q_offset + rel)), q1 = T5_MIN(Tq - 1, Tk - 1 - q_offset - rel);
        for (int q = q0 + threadIdx.x; q <= q1; q += blockDim.x) acc += d[(size_t)q * Tk + (q + q_offset + rel)];
    }
    acc = block_reduce_sum(acc, red);
    if (threadIdx.x == 0) {
        G* o = dtable + (size_t)nb * H + h;
        *o = from_f32<G>(accumulate ? to_f32<G>(*o) + acc : acc);
    }
}

// ---- kernel launchers

template <typename T>
static void position_bias_forward_t(float* bias, const void* table, const int* buckets, int rel_offset, int H, int Tq,
                                    int Tk, int q_offset, cudaStream_t stream) {
    const size_t n = (size_t)H * Tq * Tk;
    position_bias_forward_kernel1<T><<<grid_1d(n, 256), 256, 0, stream>>>(bias, (const T*)table, buckets, rel_offset,
                                                                          H, Tq, Tk, q_offset);
}

extern "C" void position_bias_forward(float* bias, const void* table, DType dt, const int* buckets, int rel_offset,
                                      int NB, int H, int Tq, int Tk, int q_offset, cudaStream_t stream) {
    (void)NB;  // the bucket values come from the host table, already in [0, NB)
    if (H <= 0 || Tq <= 0 || Tk <= 0) return;
    if (rel_offset - (Tq - 1 + q_offset) < 0)
        t5_die(T5_EXIT_FAILURE, "position_bias_forward: rel_offset %d does not cover rel = %d", rel_offset,
               -(Tq - 1 + q_offset));
    DTYPE_DISPATCH(dt, position_bias_forward_t, bias, table, buckets, rel_offset, H, Tq, Tk, q_offset, stream);
    CUDA_LAUNCH_CHECK();
}

template <typename G>
static void position_bias_backward_t(void* dtable, const float* dbias, const int* buckets, int rel_offset, int NB, int H,
                                     int Tq, int Tk, int q_offset, bool accumulate, cudaStream_t stream) {
    const int nrel = Tq + Tk - 1;  // rel_hi - rel_lo + 1
    const bool use_smem = (size_t)nrel * sizeof(int) <= 32 * 1024;
    position_bias_backward_kernel1<G><<<dim3(NB, H), 256, use_smem ? nrel * sizeof(int) : 0, stream>>>(
        (G*)dtable, dbias, buckets, rel_offset, H, Tq, Tk, q_offset, use_smem, accumulate);
}

extern "C" void position_bias_backward(void* dtable, DType dt_dtable, bool accumulate, const float* dbias,
                                       const int* buckets, int rel_offset, int NB, int H, int Tq, int Tk, int q_offset,
                                       cudaStream_t stream) {
    if (NB <= 0 || H <= 0 || Tq <= 0 || Tk <= 0) return;
    if (rel_offset - (Tq - 1 + q_offset) < 0)
        t5_die(T5_EXIT_FAILURE, "position_bias_backward: rel_offset %d does not cover rel = %d", rel_offset,
               -(Tq - 1 + q_offset));
    DTYPE_DISPATCH(dt_dtable, position_bias_backward_t, dtable, dbias, buckets, rel_offset, NB, H, Tq, Tk, q_offset,
                   accumulate, stream);
    CUDA_LAUNCH_CHECK();
}
