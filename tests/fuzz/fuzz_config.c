/* libFuzzer target: arbitrary bytes as config.yaml text. Every input must be
 * either accepted or refused with a message, without leaks or undefined behavior. */
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fawn_config cfg;
    if (config_load_string(&cfg, (const char *)data, size) == 0)
        config_free(&cfg); /* a refusal leaves cfg freed already */
    return 0;
}
