/*
 * main.c: the t5train command line. The first argument picks a subcommand; anything else
 * (or nothing) is a training/evaluation run driven by the JSON config and flags.
 */
#include <stdbool.h>
#include <stdio.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "version.h"
#include "../base/common.h"
#include "../base/signals.h"

typedef struct {
    const char* name;
    int (*main)(int argc, char** argv);
    const char* help;
} Subcommand;

static const Subcommand SUBCOMMANDS[] = {
    {"tokenize", tokenize_main, "print the token ids HF would give each input line (or --decode ids)"},
    {"bleu", bleu_main, "corpus BLEU of a hypothesis file against reference files, as sacrebleu"},
    {"dump-grads", dump_grads_main, "one forward+backward on a JSON batch; write loss, logits, grads"},
    {"launch-check", launch_check_main, "each rank of a launch bootstraps (MPI / rendezvous, NCCL) and prints its place"},
    {"estimate", estimate_main, "memory per ZeRO plan (GPU, host), fits here?, step time; DeepSpeed's numbers"},
    {"env", env_main, "versions, GPUs, memory, free disk, libraries and variables (DeepSpeed's ds_report)"},
    {"push", push_main, "a folder (a run's output_dir) to a Hub model repo, as --push_to_hub does at the end"},
};

static void print_usage(void) {
    printf("usage: t5train [--config FILE] [--deepspeed FILE] [flags...]   train / evaluate (see --help)\n");
    printf("       t5train --version                  version, git commit, CUDA / cuBLASLt / NCCL / MPI versions\n");
    for (size_t i = 0; i < T5_ARRAY_LEN(SUBCOMMANDS); i++)
        printf("       t5train %-10s ...   %s\n", SUBCOMMANDS[i].name, SUBCOMMANDS[i].help);
}

// Every write to stdout is checked (issue 14): at exit, a flush or close that fails (a full disk, a
// closed pipe, /dev/full) turns a would-be success into exit 1 with one line; EPIPE too, since a reader
// that went away did not get the whole answer.
static void close_stdout_check(void) {
    int failed = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    if (fclose(stdout) != 0 && !failed) {
        failed = 1;
        e = errno;
    }
    if (failed && t5_error_reported) return;  // the error line is out already; its exit code stands
    if (failed) {
        fprintf(stderr, "t5train: error: cannot write to standard output: %s\n", e ? strerror(e) : "write error");
        _exit(T5_EXIT_FAILURE);
    }
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    atexit(close_stdout_check);
    // SIGINT/SIGTERM outside the training loop: stop at once, remove the files being written (signals.h)
    signals_install_immediate();
    // a first argument that is a flag or a .json file (HF's `run_translation.py job.json`) is a run
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        ReportItem items[16];
        int n = 0;
        version_items(items, &n, (int)T5_ARRAY_LEN(items));
        report_print(stdout, items, n);
        return T5_EXIT_OK;
    }
    size_t n1 = argc >= 2 ? strlen(argv[1]) : 0;
    bool is_json = n1 > 5 && strcmp(argv[1] + n1 - 5, ".json") == 0;
    if (argc >= 2 && argv[1][0] != '-' && !is_json) {
        for (size_t i = 0; i < T5_ARRAY_LEN(SUBCOMMANDS); i++)
            if (strcmp(argv[1], SUBCOMMANDS[i].name) == 0) return SUBCOMMANDS[i].main(argc - 1, argv + 1);
        if (strcmp(argv[1], "help") == 0) {
            print_usage();
            return T5_EXIT_OK;
        }
        fprintf(stderr, "t5train: error: unknown command '%s'\n", argv[1]);
        print_usage();
        return T5_EXIT_USAGE;
    }
    // --num_gpus N: this process starts N ranks of the rest of the command line (deepspeed's launcher)
    if (launch_num_gpus_given(argc, argv)) return launch_main(argc, argv);
    return run_main(argc, argv);
}
