/*
 * loss_scaler.c: DeepSpeed's DynamicLossScaler / static LossScaler (see loss_scaler.h).
 * Golden test: test/test_loss_scaler.c against scripts/make_loss_scaler_fixtures.py.
 */
#include "loss_scaler.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void loss_scaler_config_default(LossScalerConfig* c) {
    memset(c, 0, sizeof *c);
    // deepspeed/runtime/constants.py
    c->loss_scale = 0.0;            // FP16_LOSS_SCALE_DEFAULT
    c->initial_scale_power = 16;    // FP16_INITIAL_SCALE_POWER_DEFAULT
    c->loss_scale_window = 1000;    // FP16_LOSS_SCALE_WINDOW_DEFAULT
    c->hysteresis = 2;              // FP16_HYSTERESIS_DEFAULT
    c->consecutive_hysteresis = false;  // FP16_CONSECUTIVE_HYSTERESIS_DEFAULT
    c->min_loss_scale = 1.0;        // FP16_MIN_LOSS_SCALE_DEFAULT
}

int loss_scaler_init(LossScaler* s, const LossScalerConfig* c, char* err, size_t errcap) {
    memset(s, 0, sizeof *s);
    if (err && errcap) err[0] = '\0';
    if (!(c->loss_scale >= 0.0) || isinf(c->loss_scale)) {
        if (err) snprintf(err, errcap, "fp16.loss_scale must be 0 (dynamic) or a positive number, got %g", c->loss_scale);
        return -1;
    }
    s->scale_factor = 2.0;
    s->raise_error_at_min_scale = true;
    s->last_overflow_iter = -1;
    s->cur_iter = 0;
    if (c->loss_scale > 0.0) {  // CreateLossScaler: static LossScaler(scale=loss_scale)
        s->dynamic = false;
        s->cur_scale = c->loss_scale;
        s->scale_window = 1;
        s->min_scale = c->loss_scale;
        s->delayed_shift = 1;
        s->cur_hysteresis = 1;
        return 0;
    }
    s->dynamic = true;
    bool any = c->has_initial_scale_power || c->has_loss_scale_window || c->has_hysteresis ||
               c->has_consecutive_hysteresis || c->has_min_loss_scale;
    if (!any) {
        // get_dynamic_loss_scale_args() returned None -> DynamicLossScaler() class defaults
        s->cur_scale = 4294967296.0;  // 2**32
        s->scale_window = 1000;
        s->min_scale = 1.0;
        s->delayed_shift = 1;
        s->consecutive_hysteresis = false;
    } else {
        LossScalerConfig d;
        loss_scaler_config_default(&d);
        int power = c->has_initial_scale_power ? c->initial_scale_power : d.initial_scale_power;
        s->scale_window = c->has_loss_scale_window ? c->loss_scale_window : d.loss_scale_window;
        s->delayed_shift = c->has_hysteresis ? c->hysteresis : d.hysteresis;
        s->consecutive_hysteresis = c->has_consecutive_hysteresis ? c->consecutive_hysteresis : d.consecutive_hysteresis;
        s->min_scale = c->has_min_loss_scale ? c->min_loss_scale : d.min_loss_scale;
        if (power < 0 || power > 1023) {
            if (err) snprintf(err, errcap, "fp16.initial_scale_power must be in [0, 1023], got %d", power);
            return -1;
        }
        s->cur_scale = ldexp(1.0, power);
    }
    if (s->scale_window < 1) {
        if (err) snprintf(err, errcap, "fp16.loss_scale_window must be >= 1, got %lld", (long long)s->scale_window);
        return -1;
    }
    if (s->delayed_shift < 1) {
        if (err) snprintf(err, errcap, "fp16.hysteresis must be >= 1, got %d", s->delayed_shift);
        return -1;
    }
    if (!(s->min_scale > 0.0) || isinf(s->min_scale)) {
        if (err) snprintf(err, errcap, "fp16.min_loss_scale must be a positive number, got %g", s->min_scale);
        return -1;
    }
    s->cur_hysteresis = s->delayed_shift;
    return 0;
}

LossScalerUpdate loss_scaler_update(LossScaler* s, bool overflow) {
    LossScalerUpdate u = {0};
    u.overflow = overflow;
    u.prev_scale = s->cur_scale;
    u.prev_hysteresis = s->cur_hysteresis;
    if (!s->dynamic) {  // LossScaler.update_scale: pass
        u.event = overflow ? LOSS_SCALER_STATIC_OVERFLOW : LOSS_SCALER_KEPT;
        u.new_scale = s->cur_scale;
        u.new_hysteresis = s->cur_hysteresis;
        s->cur_iter += 1;  // bookkeeping only; a static scaler has no iteration state in DeepSpeed
        return u;
    }
    if (overflow) {
        if (s->delayed_shift == 1 || s->cur_hysteresis == 1) {
            if (s->cur_scale == s->min_scale && s->raise_error_at_min_scale) {
                // DeepSpeed raises here: nothing below runs, cur_iter is not advanced
                u.event = LOSS_SCALER_AT_MIN;
                u.new_scale = s->cur_scale;
                u.new_hysteresis = s->cur_hysteresis;
                return u;
            }
            double next = s->cur_scale / s->scale_factor;
            if (next < s->min_scale) next = s->min_scale;  // max(cur/factor, min_scale)
            s->cur_scale = next;
            u.event = LOSS_SCALER_REDUCED;
        } else {
            s->cur_hysteresis -= 1;
            u.event = LOSS_SCALER_HYSTERESIS;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        u.event = LOSS_SCALER_KEPT;
        if (s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
        // Python's % with a positive modulus; cur_iter - last_overflow_iter is always >= 1 here
        if ((s->cur_iter - s->last_overflow_iter) % s->scale_window == 0) {
            if (!s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
            s->cur_scale *= s->scale_factor;
            u.event = LOSS_SCALER_GREW;
        }
    }
    s->cur_iter += 1;
    u.new_scale = s->cur_scale;
    u.new_hysteresis = s->cur_hysteresis;
    return u;
}

// Python int(x) of a float scale printed in full: trunc() then "%.0f" (glibc prints the exact value).
static int format_int_of_float(char* buf, size_t cap, double x) {
    return snprintf(buf, cap, "%.0f", trunc(x));
}

int loss_scaler_format_overflow(char* buf, size_t cap, const LossScalerUpdate* u, int rank) {
    if (cap) buf[0] = '\0';
    char a[400], b[400];
    format_int_of_float(a, sizeof a, u->prev_scale);
    if (u->event == LOSS_SCALER_REDUCED) {
        format_int_of_float(b, sizeof b, u->new_scale);
        return snprintf(buf, cap, "[deepspeed] OVERFLOW! Rank %d Skipping step. Attempted loss scale: %s, reducing to %s",
                        rank, a, b);
    }
    if (u->event == LOSS_SCALER_HYSTERESIS) {
        return snprintf(buf, cap,
                        "[deepspeed] OVERFLOW! Rank %d Skipping step. Attempted loss scale: %s, but hysteresis is %d. "
                        "Reducing hysteresis to %d",
                        rank, a, u->prev_hysteresis, u->prev_hysteresis - 1);
    }
    return 0;
}
