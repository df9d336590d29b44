/*
 * run.c: `t5train [--config FILE] [flags...]`, a training / evaluation run.
 *
 * Order (DESIGN.md invariant 5; nothing is created in output_dir before the config is valid):
 *   parse argv (files, then flags) -> resolve "auto" -> check output_dir -> print the table
 *   -> (--dry_run: exit 0) -> write output_dir/t5train_config.json -> check what this build
 *   implements (config_check_implemented) -> run the engines.
 * Today no engine exists, so a real run stops at config_check_implemented with exit 1 and
 * "not implemented yet: training (do_train)" and friends.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../src/commands.h"
#include "../src/common.h"
#include "config.h"

// world size from the launcher's environment (deepspeed/torchrun: WORLD_SIZE; mpirun: OMPI_COMM_WORLD_SIZE)
static int run_world_size(void) {
    const char* vars[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < T5_ARRAY_LEN(vars); i++) {
        const char* v = getenv(vars[i]);
        if (v && v[0]) {
            char* end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 1 << 20) t5_die(T5_EXIT_USAGE, "bad %s=%s in the environment", vars[i], v);
            return (int)n;
        }
    }
    return 1;
}

int run_main(int argc, char** argv) {
    static RunConfig cfg;  // large (paths): static, not on the stack
    RunConfig* c = &cfg;
    char err[CONFIG_ERR_LEN];
    config_init(c);
    c->world_size = run_world_size();

    int rc = config_parse_args(c, argc, argv, err, sizeof err);
    if (rc) t5_die(rc, "%s", err);
    if (c->help) {
        config_print_help(stdout);
        return T5_EXIT_OK;
    }
    if ((rc = config_resolve(c, err, sizeof err))) t5_die(rc, "%s", err);
    if ((rc = config_check_output_dir(c, err, sizeof err))) t5_die(rc, "%s", err);

    if (t5_rank == 0) {
        config_print_table(c, stdout);
        if (!c->source_prefix_set && strstr(c->model_name_or_path, "t5"))
            t5_warn("You're running a t5 model but didn't provide a source prefix, which is expected, e.g. with "
                    "`--source_prefix 'translate English to Romanian: '`");
    }
    if (c->dry_run) return T5_EXIT_OK;

    if (t5_mkdir_p(c->output_dir) != 0)
        t5_die(T5_EXIT_FAILURE, "cannot create output_dir %s: %s", c->output_dir, strerror(errno));
    char* path = t5_path_join(c->output_dir, "t5train_config.json");
    if (t5_rank == 0 && (rc = config_write_json(c, path, err, sizeof err))) t5_die(rc, "%s", err);
    free(path);

    if ((rc = config_check_implemented(c, err, sizeof err))) t5_die(rc, "%s", err);
    t5_die(T5_EXIT_FAILURE, "not implemented yet: the run itself (no engine is wired into run_main)");
}
