/*
 * test_optim_groups.c: hf_param_gets_weight_decay over every T5 parameter name pattern, checked two
 * ways: against the expected answer written out by hand (from the rule in model/optim_groups.h) and
 * against POSIX regular expressions that are the HF patterns verbatim (an independent oracle).
 */
#include "t5test.h"

#include <ctype.h>
#include <regex.h>

#include "../model/optim_groups.h"

// HF Trainer.get_decay_parameter_names patterns, searched in the lowercased name
static bool oracle_decay(const char* name) {
    static const char* pats[] = {"bias", "layernorm", "rmsnorm", "(^|\\.)norm($|\\.)", "_norm($|\\.)"};
    char low[512];
    size_t n = strlen(name);
    assert_true(n < sizeof low);
    for (size_t i = 0; i <= n; i++) low[i] = (char)tolower((unsigned char)name[i]);
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
        regex_t re;
        assert_int_equal(regcomp(&re, pats[i], REG_EXTENDED | REG_NOSUB), 0);
        int hit = regexec(&re, low, 0, NULL, 0) == 0;
        regfree(&re);
        if (hit) return false;
    }
    return true;
}

static void check(const char* name, bool expect) {
    bool got = hf_param_gets_weight_decay(name);
    if (got != expect) fail_msg("%s: got decay=%d, expected %d", name, got, expect);
    if (oracle_decay(name) != expect) fail_msg("%s: regex oracle disagrees with the expectation", name);
}

static void test_t5_names(void** state) {
    (void)state;
    int count = 0;
    check("shared.weight", true), count++;
    check("lm_head.weight", true), count++;
    check("encoder.embed_tokens.weight", true), count++;
    check("decoder.embed_tokens.weight", true), count++;
    check("encoder.final_layer_norm.weight", false), count++;
    check("decoder.final_layer_norm.weight", false), count++;
    const char* stacks[] = {"encoder", "decoder"};
    for (int s = 0; s < 2; s++) {
        for (int l = 0; l < 24; l++) {
            char nm[256];
            const char* st = stacks[s];
            const char* proj[] = {"q", "k", "v", "o"};
            for (int p = 0; p < 4; p++) {
                snprintf(nm, sizeof nm, "%s.block.%d.layer.0.SelfAttention.%s.weight", st, l, proj[p]);
                check(nm, true), count++;
                if (s == 1) {
                    snprintf(nm, sizeof nm, "decoder.block.%d.layer.1.EncDecAttention.%s.weight", l, proj[p]);
                    check(nm, true), count++;
                }
            }
            snprintf(nm, sizeof nm, "%s.block.%d.layer.0.layer_norm.weight", st, l);
            check(nm, false), count++;
            int ff = s == 0 ? 1 : 2;
            snprintf(nm, sizeof nm, "%s.block.%d.layer.%d.layer_norm.weight", st, l, ff);
            check(nm, false), count++;
            if (s == 1) {
                snprintf(nm, sizeof nm, "decoder.block.%d.layer.1.layer_norm.weight", l);
                check(nm, false), count++;
            }
            const char* mlp[] = {"wi", "wo", "wi_0", "wi_1"};
            for (int m = 0; m < 4; m++) {
                snprintf(nm, sizeof nm, "%s.block.%d.layer.%d.DenseReluDense.%s.weight", st, l, ff, mlp[m]);
                check(nm, true), count++;
            }
        }
        // only block 0 of each stack has the bucketed position bias; "bias" in the name excludes it
        char nm[256];
        snprintf(nm, sizeof nm, "%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight", stacks[s]);
        check(nm, false), count++;
    }
    print_message("# %d T5 parameter names checked\n", count);
}

static void test_edge_names(void** state) {
    (void)state;
    check("model.norm.weight", false);          // (^|\.)norm($|\.)
    check("norm", false);
    check("x.input_norm", false);                // _norm$
    check("x.normalizer.weight", true);          // "norm" not a whole component
    check("x.enorm.weight", true);
    check("x.LayerNorm.weight", false);          // lowercased "layernorm"
    check("x.RMSNorm.scale", false);
    check("x.dense.Bias", false);
    check("x.dense.weight", true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t5_names),
        cmocka_unit_test(test_edge_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
