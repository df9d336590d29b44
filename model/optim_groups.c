/*
 * optim_groups.c: the HF Trainer weight-decay rule (see optim_groups.h for the source lines).
 * The five regular expressions are matched by hand on the lowercased name:
 *   "bias", "layernorm", "rmsnorm"          substring anywhere
 *   (?:^|\.)norm(?:$|\.)                     a whole dotted component "norm"
 *   _norm(?:$|\.)                            a component ending in "_norm"
 */
#include "optim_groups.h"

#include <ctype.h>
#include <string.h>

bool hf_param_gets_weight_decay(const char* hf_param_name) {
    char low[512];
    size_t n = strlen(hf_param_name);
    if (n >= sizeof low) n = sizeof low - 1;
    for (size_t i = 0; i < n; i++) low[i] = (char)tolower((unsigned char)hf_param_name[i]);
    low[n] = '\0';
    if (strstr(low, "bias") || strstr(low, "layernorm") || strstr(low, "rmsnorm")) return false;
    for (const char* p = strstr(low, "norm"); p; p = strstr(p + 1, "norm")) {
        char after = p[4];
        bool end_ok = after == '\0' || after == '.';
        if (!end_ok) continue;
        if (p == low || p[-1] == '.') return false;  // (?:^|\.)norm(?:$|\.)
        if (p[-1] == '_') return false;              // _norm(?:$|\.)
    }
    return true;
}
