/* libFuzzer target for the answer of the memory extraction call: model
 * output, untrusted, that memory_facts_parse reads into facts to keep.
 * Input: the answer's text (not NUL-terminated). Besides memory errors and
 * undefined behaviour, it checks that
 * - the answer is read (0) or refused (FAWN_EINVAL), and a refusal hands
 *   out nothing;
 * - at most MEMORY_ANSWER_FACTS_MAX facts come out, each one the store
 *   accepts (store_fact_check), its content trimmed, its source the one
 *   given;
 * - the context those facts make for the model holds no '<' or '>' but
 *   those of its own markers: no fact can close the fence. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory.h"
#include "fuzz_support.h"

#define SOURCE "thread-1"

/* Occurrences of c in s. */
static size_t count(const char *s, char c) {
    size_t n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    store_fact *facts = (store_fact *)data;
    size_t n = 1;
    int r = memory_facts_parse(&facts, &n, (const char *)data, size, SOURCE);
    check(r == 0 || r == FAWN_EINVAL);
    if (r < 0 || n == 0) {
        check(facts == NULL && n == 0);
        return 0;
    }
    check(size <= MEMORY_ANSWER_MAX && n <= MEMORY_ANSWER_FACTS_MAX);
    for (size_t i = 0; i < n; i++) {
        const store_fact *f = &facts[i];
        size_t len = strlen(f->content);
        check(store_fact_check(f) == 0);
        check(!isspace((unsigned char)f->content[0]) &&
              !isspace((unsigned char)f->content[len - 1]));
        check(strcmp(f->source, SOURCE) == 0);
    }
    char *context = NULL;
    check(memory_context(&context, facts, n, SIZE_MAX, 0) == 0);
    check(count(context, '<') == 2 && count(context, '>') == 2);
    check(strncmp(context, "<memory>", 8) == 0);
    check(strcmp(context + strlen(context) - 9, "</memory>") == 0);
    free(context);
    free(facts);
    return 0;
}
