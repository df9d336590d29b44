/*
 * fuzz_config.c: the configuration front end (src/cli/config*.c) on arbitrary bytes. The input is
 * split at NUL bytes into an argv (the first piece is also tried as a JSON config text); every
 * piece goes through config_parse_args, then config_resolve, exactly as in a run (minus the run).
 */
#include "../../src/cli/config.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 4096) return 0;
    static RunConfig c;
    char err[CONFIG_ERR_LEN];
    char* buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    // the whole input as a JSON config text
    config_init(&c);
    if (config_load_string(&c, buf, "fuzz.json", err, sizeof err) == 0) config_resolve(&c, err, sizeof err);
    // the input as a command line: pieces separated by NUL bytes
    char* argv[65];
    int argc = 0;
    argv[argc++] = "t5train";
    for (size_t i = 0; i < size && argc < 64;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    config_init(&c);
    if (config_parse_args(&c, argc, argv, err, sizeof err) == 0 && !c.help)
        config_resolve(&c, err, sizeof err);
    free(buf);
    return 0;
}
