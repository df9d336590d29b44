/*
 * params.h: THE parameter table of a T5 model (STYLE.md 7-8). One row per parameter tensor:
 * its HF name, shape, role, the ZeRO unit that owns it, its element offset inside that unit's
 * contiguous buffer, and the weight-decay and persistence flags. Allocation (src/zero/zero.c),
 * checkpoint load/save (model/t5_weights.c), dump-grads and the model's weight pointers all come
 * from this one table; nothing indexes parameters by magic numbers.
 *
 * Units (DESIGN.md invariant 1), in this order, each one contiguous flat range:
 *   unit 0                      "shared"        shared.weight (V, D)
 *   units 1 .. L                "encoder.block.i"  every tensor of encoder block i (block 0 adds
 *                                                  the encoder relative_attention_bias table)
 *   units L+1 .. L+Ld           "decoder.block.i"  every tensor of decoder block i
 *   unit L+Ld+1                 "final_norms"   encoder.final_layer_norm.weight, decoder.final_layer_norm.weight
 *   unit L+Ld+2 (untied only)   "lm_head"       lm_head.weight (V, D)
 * Inside a unit tensors follow HF's module registration order (q, k, v, o, relative bias,
 * layer_norm, then cross-attention, then FF); each offset is rounded up to PARAMS_ALIGN_ELEMS
 * elements so every tensor is 16-byte aligned in every dtype (fp32, fp16, bf16).
 *
 * Table order (unit-major, then offset) is also the checkpoint and dump order.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "t5_config.h"

#ifdef __cplusplus
extern "C" {
#endif

// 8 elements = 16 bytes in fp16/bf16, 32 bytes in fp32: cuBLASLt needs 16-byte aligned operands.
#define PARAMS_ALIGN_ELEMS 8
// DeepSpeed's param_persistence_threshold default: tensors with numel <= this stay gathered.
#define PARAMS_PERSISTENCE_THRESHOLD 100000

typedef enum { STACK_NONE = 0, STACK_ENCODER = 1, STACK_DECODER = 2 } T5Stack;

typedef enum {
    UNIT_SHARED = 0,
    UNIT_ENC_BLOCK,
    UNIT_DEC_BLOCK,
    UNIT_FINAL_NORMS,
    UNIT_LM_HEAD,
} UnitKind;

// What a tensor does; with (stack, layer) it identifies the tensor uniquely.
typedef enum {
    ROLE_EMBED = 0,     // shared.weight (V, D)
    ROLE_SA_Q,          // SelfAttention.q.weight (H*Dk, D)
    ROLE_SA_K,          // (H*Dk, D)
    ROLE_SA_V,          // (H*Dk, D)
    ROLE_SA_O,          // (D, H*Dk)
    ROLE_SA_RELBIAS,    // SelfAttention.relative_attention_bias.weight (NB, H), block 0 only
    ROLE_SA_LN,         // layer.0.layer_norm.weight (D)
    ROLE_CA_Q,          // decoder EncDecAttention.q.weight (H*Dk, D)
    ROLE_CA_K,
    ROLE_CA_V,
    ROLE_CA_O,          // (D, H*Dk)
    ROLE_CA_LN,         // decoder layer.1.layer_norm.weight (D)
    ROLE_FF_WI,         // DenseReluDense.wi.weight (F, D)       v1.0
    ROLE_FF_WI0,        // DenseReluDense.wi_0.weight (F, D)     v1.1
    ROLE_FF_WI1,        // DenseReluDense.wi_1.weight (F, D)     v1.1
    ROLE_FF_WO,         // DenseReluDense.wo.weight (D, F)
    ROLE_FF_LN,         // layer.{1,2}.layer_norm.weight (D)
    ROLE_FINAL_LN,      // {encoder,decoder}.final_layer_norm.weight (D)
    ROLE_LM_HEAD,       // lm_head.weight (V, D), untied only
    ROLE_COUNT
} ParamRole;

typedef struct {
    char name[96];       // HF state-dict name, e.g. "decoder.block.3.layer.1.EncDecAttention.q.weight"
    int ndim;            // 1 or 2
    int64_t shape[2];    // HF (PyTorch) shape; shape[1] = 1 when ndim == 1
    size_t numel;
    ParamRole role;
    T5Stack stack;
    int layer;           // block index, -1 when not in a block
    int unit;            // owning unit
    size_t offset;       // element offset inside the unit's buffer (multiple of PARAMS_ALIGN_ELEMS)
    bool decay;          // gets weight decay (HF Trainer: everything except layer norms and biases)
    bool persistent;     // numel <= PARAMS_PERSISTENCE_THRESHOLD (ZeRO-3 keeps it gathered)
} ParamDesc;

typedef struct {
    char name[32];       // "shared", "encoder.block.3", "final_norms", ...
    UnitKind kind;
    int layer;           // block index or -1
    size_t numel;        // padded size of the unit's buffer in elements (multiple of PARAMS_ALIGN_ELEMS)
    int first_param;     // index of its first tensor in ParamTable.params
    int num_params;      // its tensors are params[first_param .. first_param + num_params)
} UnitDesc;

typedef struct {
    T5Config cfg;
    int num_params;
    ParamDesc* params;   // (num_params) in unit-major, offset order
    int num_units;
    UnitDesc* units;     // (num_units)
    size_t total_numel;  // sum of real tensor sizes (tied embedding once)
    size_t total_padded; // sum of unit buffer sizes
} ParamTable;

// Builds the table for cfg. Returns 0, or -1 with a message when cfg is not a valid T5 architecture.
int params_build(ParamTable* t, const T5Config* cfg, char* err, size_t errlen);
void params_free(ParamTable* t);

// Unit indices (the layout above).
int params_unit_shared(const ParamTable* t);
int params_unit_enc_block(const ParamTable* t, int layer);
int params_unit_dec_block(const ParamTable* t, int layer);
int params_unit_final_norms(const ParamTable* t);
int params_unit_lm_head(const ParamTable* t);  // -1 when tied

// Index of the tensor with this role in (stack, layer), or -1 (e.g. ROLE_SA_RELBIAS in block 1).
// For ROLE_EMBED / ROLE_LM_HEAD pass STACK_NONE, -1; for ROLE_FINAL_LN the stack and -1.
int params_find(const ParamTable* t, ParamRole role, T5Stack stack, int layer);

// The parameter indices of one block (-1 where the block has no such tensor), for the model's forward/backward
// and the generator's decode step.
typedef struct {
    int q, k, v, o, relbias, ln;  // self-attention (relbias: block 0 only, else -1)
    int cq, ck, cv, co, cln;      // cross-attention (decoder only, else -1)
    int wi, wi0, wi1, wo, ffln;   // feed-forward (wi for ReLU; wi0/wi1 for gated)
} BlockParamIdx;
void params_block_index(const ParamTable* t, T5Stack stack, int layer, BlockParamIdx* b);
// Index of the tensor with this HF name, or -1.
int params_find_name(const ParamTable* t, const char* name);

// True for the tensors the model reads in fp32 (as HF autocast runs those ops on fp32 parameters): the shared
// embedding, the relative-bias tables and every RMSNorm weight. The ZeRO engine keeps these as fp32 views.
bool params_role_reads_fp32(ParamRole role);

// The weight-decay rule used for ParamDesc.decay: model/optim_groups.h hf_param_gets_weight_decay (HF Trainer:
// no decay for layer norms and relative_attention_bias, decay for everything else).
bool params_name_gets_decay(const char* hf_name);

#ifdef __cplusplus
}
#endif
