/*
 * optim_groups.h: which parameters get weight decay, by HF parameter name, as the HF Trainer decides.
 *
 * transformers src/transformers/trainer.py, Trainer.get_decay_parameter_names (4.50+ and 5.x):
 *     forbidden_name_patterns = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]
 *     decay_parameters = get_parameter_names(model, [nn.LayerNorm], forbidden_name_patterns)
 * get_parameter_names (trainer_pt_utils.py) drops a parameter whose lowercased name matches any pattern
 * (re.search) or which lives inside an nn.LayerNorm (T5 has none: T5LayerNorm is its own class).
 * Older releases (<= 4.4x) used get_parameter_names(model, ALL_LAYERNORM_LAYERS) with T5LayerNorm in
 * ALL_LAYERNORM_LAYERS and then `"bias" not in name`: for every T5 parameter both rules agree.
 *
 * Consequence for T5: no decay for ...layer_norm.weight, ...final_layer_norm.weight AND for
 * ...relative_attention_bias.weight (it contains "bias": a substring filter, not a module-type test);
 * decay for shared.weight, lm_head.weight, q/k/v/o, wi/wo/wi_0/wi_1.
 */
#pragma once
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

// true when the HF Trainer puts `hf_param_name` (e.g. "encoder.block.0.layer.0.SelfAttention.q.weight")
// in the weight_decay group, false when it goes to the weight_decay = 0.0 group.
bool hf_param_gets_weight_decay(const char* hf_param_name);

#ifdef __cplusplus
}
#endif
