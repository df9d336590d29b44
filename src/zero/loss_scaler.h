/*
 * loss_scaler.h: DeepSpeed's fp16 loss scaler as a small pure-C state machine (REFERENCE §4.6).
 *
 * Transcribed from microsoft/DeepSpeed deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler,
 * LossScaler, CreateLossScaler) and deepspeed/runtime/config.py (get_dynamic_loss_scale_args):
 *
 *   - fp16.loss_scale > 0            -> static scale (LossScaler): update never changes anything;
 *                                       an overflowing step is still skipped (stage3.py), silently.
 *   - fp16.loss_scale == 0, and the fp16 block names ANY of initial_scale_power, loss_scale_window,
 *     hysteresis, consecutive_hysteresis, min_loss_scale
 *                                    -> DynamicLossScaler(init_scale=2**initial_scale_power (16),
 *                                       scale_window (1000), delayed_shift=hysteresis (2),
 *                                       consecutive_hysteresis (false), min_scale (1))
 *   - fp16.loss_scale == 0 and NONE of them present
 *                                    -> DynamicLossScaler() class defaults: init 2**32, window 1000,
 *                                       delayed_shift 1, consecutive false, min 1   (the "quirk")
 *   scale_factor is always 2 and raise_error_at_min_scale is always true (the class default).
 *
 * Usage per optimizer step (overflow already all-reduced with MAX across ranks):
 *     LossScalerUpdate u = loss_scaler_update(&s, overflow);
 *     if (u.event == LOSS_SCALER_AT_MIN) t5_die(1, "%s", LOSS_SCALER_MIN_SCALE_MSG);
 *     if (rank == 0 && loss_scaler_format_overflow(line, sizeof line, &u, 0)) log(line);
 *     if (overflow) skip the step (Adam step count and the LR schedule do not advance)
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// DeepSpeed's text when an overflow happens at the minimum scale (raise_error_at_min_scale).
#define LOSS_SCALER_MIN_SCALE_MSG \
    "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."

// The fp16 block of a DeepSpeed config: values, and which keys were present in the JSON.
typedef struct {
    double loss_scale;  // fp16.loss_scale: 0 = dynamic, > 0 = static scale
    int initial_scale_power;
    int64_t loss_scale_window;
    int hysteresis;
    bool consecutive_hysteresis;
    double min_loss_scale;
    bool has_initial_scale_power;
    bool has_loss_scale_window;
    bool has_hysteresis;
    bool has_consecutive_hysteresis;
    bool has_min_loss_scale;
} LossScalerConfig;

// DeepSpeed's fields (loss_scaler.py DynamicLossScaler.__init__).
typedef struct {
    bool dynamic;                 // false: static LossScaler (cur_scale never changes)
    double cur_scale;             // the loss is multiplied by this before backward
    int64_t cur_iter;             // update() calls so far
    int64_t last_overflow_iter;   // -1 before the first overflow
    double scale_factor;          // 2
    int64_t scale_window;         // clean iterations before the scale doubles
    double min_scale;
    int delayed_shift;            // "hysteresis": overflows tolerated before the scale drops
    int cur_hysteresis;
    bool consecutive_hysteresis;  // refill cur_hysteresis after every clean step
    bool raise_error_at_min_scale;
} LossScaler;

typedef enum {
    LOSS_SCALER_KEPT = 0,        // no overflow, scale unchanged
    LOSS_SCALER_GREW,            // no overflow, end of a window: scale *= 2
    LOSS_SCALER_REDUCED,         // overflow: scale = max(scale/2, min_scale)   (logged)
    LOSS_SCALER_HYSTERESIS,      // overflow: hysteresis used up by one, scale kept (logged)
    LOSS_SCALER_STATIC_OVERFLOW, // overflow with a static scale: step skipped, nothing logged
    LOSS_SCALER_AT_MIN,          // overflow at min_scale: DeepSpeed raises; the caller exits
} LossScalerEvent;

typedef struct {
    LossScalerEvent event;
    bool overflow;        // the step must be skipped
    double prev_scale;    // scale the step was attempted with
    double new_scale;
    int prev_hysteresis;  // cur_hysteresis before the update
    int new_hysteresis;
} LossScalerUpdate;

// DeepSpeed's constants.py defaults with no key marked present and loss_scale 0 (dynamic).
void loss_scaler_config_default(LossScalerConfig* c);
// Builds the scaler with the defaults quirk above. Returns 0, or -1 with a one-line message in err
// (non-positive window/hysteresis/min_loss_scale, negative loss_scale, power outside [0, 1023]).
int loss_scaler_init(LossScaler* s, const LossScalerConfig* c, char* err, size_t errcap);
// DynamicLossScaler.update_scale(overflow), then cur_iter += 1. With LOSS_SCALER_AT_MIN the state is
// left as DeepSpeed leaves it when it raises (unchanged).
LossScalerUpdate loss_scaler_update(LossScaler* s, bool overflow);
// Writes DeepSpeed's rank-0 overflow line for REDUCED / HYSTERESIS events:
//   "[deepspeed] OVERFLOW! Rank R Skipping step. Attempted loss scale: X, reducing to Y"
//   "[deepspeed] OVERFLOW! Rank R Skipping step. Attempted loss scale: X, but hysteresis is H.
//    Reducing hysteresis to H-1"   (one line)
// X and Y as Python's int(float): truncated, printed in full. Returns the length written, or 0
// (buf set to "") for events DeepSpeed does not log.
int loss_scaler_format_overflow(char* buf, size_t cap, const LossScalerUpdate* u, int rank);

#ifdef __cplusplus
}
#endif
