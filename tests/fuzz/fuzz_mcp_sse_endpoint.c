/* libFuzzer target for the old SSE transport's endpoint event
 * (mcp_sse_endpoint): the URL a server names for fawn's messages. Besides
 * memory errors, it checks that
 * - only 0, FAWN_EPROTO and FAWN_ENOMEM are returned, and nothing is kept
 *   on failure;
 * - an accepted URL is of the server's origin: read again, its scheme,
 *   host and port are the base's, and it carries no credentials. */
#include <curl/curl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mcp/mcp_internal.h"
#include "base/base.h"

static void check(int ok) {
    if (!ok)
        abort();
}

/* Part of url, or NULL (curl_free it). */
static char *part(const char *url, CURLUPart which, unsigned flags) {
    CURLU *u = curl_url();
    check(u != NULL);
    char *out = NULL;
    if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
        curl_url_get(u, which, &out, flags) != CURLUE_OK)
        out = NULL;
    curl_url_cleanup(u);
    return out;
}

static void same(const char *base, const char *url, CURLUPart which) {
    char *a = part(base, which, CURLU_DEFAULT_PORT), *b = part(url, which, CURLU_DEFAULT_PORT);
    check(a && b && strcasecmp(a, b) == 0);
    curl_free(a);
    curl_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const bases[] = {"http://127.0.0.1:8080/sse", "https://mcp.example/a/b/sse",
                                        "http://[::1]/sse?x=1", "http://localhost:3001/"};
    if (size == 0)
        return 0;
    const char *base = bases[data[0] % 4];
    char *url = (char *)1;
    int r = mcp_sse_endpoint(&url, base, (const char *)data + 1, size - 1);
    check(r == 0 || r == FAWN_EPROTO || r == FAWN_ENOMEM);
    if (r < 0) {
        check(url == NULL);
        return 0;
    }
    check(url != NULL);
    same(base, url, CURLUPART_SCHEME);
    same(base, url, CURLUPART_HOST);
    same(base, url, CURLUPART_PORT);
    char *user = part(url, CURLUPART_USER, 0);
    check(user == NULL);
    free(url);
    return 0;
}
