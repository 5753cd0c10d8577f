/* libFuzzer target: session token verification on arbitrary input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const unsigned char secret[AUTH_SECRET_BYTES] = "fuzz-secret-fuzz-secret-fuzz-se";
    char *token = malloc(size + 1);
    if (!token)
        return 0;
    memcpy(token, data, size);
    token[size] = '\0';
    auth_claims c;
    int r = auth_jwt_verify(&c, secret, token, 1000);
    free(token);
    /* Without the secret no input carries a valid signature: each is refused. */
    if (r != FAWN_EPERM)
        abort();
    return 0;
}
