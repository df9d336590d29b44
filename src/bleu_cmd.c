/*
 * bleu_cmd.c: placeholder until its engine lands; it refuses to run rather than pretend.
 */
#include "../src/commands.h"
#include "../src/common.h"

int bleu_main(int argc, char** argv) {
    (void)argc;
    (void)argv;
    t5_die(T5_EXIT_FAILURE, "not implemented yet: bleu");
}
