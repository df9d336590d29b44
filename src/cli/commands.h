/*
 * commands.h: the subcommands of the t5train binary. main.c dispatches on argv[1]; each
 * command lives with the room that owns it and returns the process exit code.
 */
#pragma once

// ./t5train [--config FILE] [flags...]: a training / evaluation run (src/cli/run.c)
int run_main(int argc, char** argv);
// ./t5train tokenize [--model DIR | --tokenizer FILE] [--target] [--decode] [FILE] (src/cli/tokenize_cmd.c)
int tokenize_main(int argc, char** argv);
// ./t5train bleu HYP_FILE REF_FILE [REF_FILE...] (src/cli/bleu_cmd.c)
int bleu_main(int argc, char** argv);
// ./t5train dump-grads --model DIR --batch FILE.json --out FILE.safetensors [--dtype fp32|fp16|bf16] (src/cli/dump_grads.c)
int dump_grads_main(int argc, char** argv);
// ./t5train estimate --model NAME|DIR [--num_gpus N] [--batch N] ... (src/cli/estimate_cmd.c, planner.c)
int estimate_main(int argc, char** argv);
// ./t5train env [--output_dir DIR] [--cache_dir DIR] [--data_dir DIR] [--json]: ds_report's counterpart (src/cli/env_cmd.c)
int env_main(int argc, char** argv);
// ./t5train push FOLDER --hub_model_id ID [--hub_token T] ...: a folder to a Hub repo (src/cli/push_cmd.c, src/upload/)
int push_main(int argc, char** argv);
// ./t5train --num_gpus N [--master_port P] ARGS...: N ranks of `t5train ARGS...` on this host (src/cli/launch_cmd.c)
#include <stdbool.h>
bool launch_num_gpus_given(int argc, char** argv);
int launch_main(int argc, char** argv);
// ./t5train launch-check [--no_nccl]: each rank bootstraps and prints its place (src/cli/launch_cmd.c)
int launch_check_main(int argc, char** argv);
