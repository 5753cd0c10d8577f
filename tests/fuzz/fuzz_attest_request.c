/* libFuzzer target for the box's POST /v1/attest body (box/attest.c): the
 * request parser and the proof computed from what it accepts. Input: a
 * request body (untrusted: from whoever reaches the box with its token).
 * Besides memory errors and undefined behaviour, it checks that
 * - only FAWN_EINVAL refuses, leaving the nonce empty;
 * - an accepted nonce is 64 lowercase hex digits, and its proof is 64
 *   lowercase hex digits that box_attest_proof_equal matches with itself
 *   and with nothing else of another nonce;
 * - the parser never reads past the length it is given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "box/attest.h"
#include "fuzz_support.h"

#define FUZZ_INPUT_MAX 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    /* An exact-size copy: a read past size is a heap overflow ASan sees. */
    char *body = malloc(size ? size : 1);
    check(body != NULL);
    memcpy(body, data, size);
    char nonce[BOX_ATTEST_NONCE_HEX + 1];
    int r = box_attest_request_parse(nonce, body, size);
    free(body);
    if (r < 0) {
        check(r == FAWN_EINVAL && !nonce[0]);
        return 0;
    }
    check(r == 0 && strlen(nonce) == BOX_ATTEST_NONCE_HEX &&
          strspn(nonce, "0123456789abcdef") == BOX_ATTEST_NONCE_HEX);
    box_attest a = {.sandbox_id = "0123456789abcdef",
                    .user = "fuzz",
                    .pod_uid = "0f8a2c34-5b6d-4e7f-8a9b-0c1d2e3f4a5b"};
    char proof[BOX_ATTEST_PROOF_HEX + 1], other[BOX_ATTEST_PROOF_HEX + 1];
    check(box_attest_proof(proof, &a, nonce) == 0);
    check(strspn(proof, "0123456789abcdef") == BOX_ATTEST_PROOF_HEX);
    check(box_attest_proof_equal(proof, proof));
    nonce[0] = nonce[0] == '0' ? '1' : '0';
    check(box_attest_proof(other, &a, nonce) == 0);
    check(!box_attest_proof_equal(proof, other));
    return 0;
}
