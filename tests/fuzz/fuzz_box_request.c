/* libFuzzer target for the /v1/shell/exec request: the bytes are parsed as a
 * JSON object body and validated into a box_exec_request, and the same bytes
 * go to the request-head parser (a box request arrives as head + body). Both
 * inputs are copied into exact-size heap buffers so that any read past their
 * end is caught by AddressSanitizer; accepted requests are checked against
 * the limits exec.h promises. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "box/env.h"
#include "box/exec.h"
#include "box/http.h"

/* Limits of the context under test: small, so both sides of each are reached. */
#define FUZZ_MAX_TIMEOUT_S 600
#define FUZZ_MAX_OUTPUT_BYTES 65536

static box_exec_ctx *fuzz_ctx(void) {
    static box_exec_ctx *ctx;
    static const box_exec_config cfg = {
        .default_timeout_s = 30,
        .max_timeout_s = FUZZ_MAX_TIMEOUT_S,
        .max_output_bytes = FUZZ_MAX_OUTPUT_BYTES,
        .max_sessions = 4,
    };
    if (!ctx && box_exec_new(&ctx, &cfg) < 0)
        abort();
    return ctx;
}

static void check_env_entry(const char *entry) {
    const char *eq = strchr(entry, '=');
    if (!eq || !box_env_name_valid(entry, (size_t)(eq - entry)))
        abort();
}

static void check_request(const box_exec_request *req) {
    if (!req->command || req->command[0] == '\0' || strlen(req->command) > BOX_COMMAND_MAX)
        abort();
    if (req->session_id && !fawn_id_valid(req->session_id))
        abort();
    if (req->cwd && req->cwd[0] != '/')
        abort();
    if (req->timeout_s > FUZZ_MAX_TIMEOUT_S)
        abort();
    if (req->max_output_bytes != 0 &&
        (req->max_output_bytes < BOX_OUTPUT_MIN || req->max_output_bytes > FUZZ_MAX_OUTPUT_BYTES))
        abort();
    if (req->n_env > BOX_REQUEST_ENV_MAX)
        abort();
    for (size_t i = 0; i < req->n_env; i++)
        check_env_entry(req->env[i]);
}

static void fuzz_exec_body(const uint8_t *data, size_t size) {
    char *body = malloc(size ? size : 1);
    if (!body)
        return;
    memcpy(body, data, size);
    json_t *obj = NULL;
    if (fjson_parse_object(&obj, body, size) == 0) {
        box_exec_request req;
        int r = box_exec_request_parse(&req, obj, fuzz_ctx());
        if (r == 0)
            check_request(&req);
        else if (r != FAWN_EINVAL)
            abort();
        /* On failure too: whatever env entries were made are the caller's. */
        for (size_t i = 0; i < req.n_env; i++)
            free(req.env[i]);
        free(req.env);
        json_decref(obj);
    }
    free(body);
}

static void fuzz_head(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return;
    memcpy(buf, data, size);
    http_request req;
    size_t head_len = 0;
    int status = 0;
    int r = http_parse_head(&req, &head_len, &status, buf, size);
    if (r == 0 && (head_len == 0 || head_len > size || req.path[0] != '/'))
        abort();
    /* Whatever follows the head is the body: validate it like the box does. */
    if (r == 0)
        fuzz_exec_body(data + head_len, size - head_len);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_exec_body(data, size);
    fuzz_head(data, size);
    return 0;
}
