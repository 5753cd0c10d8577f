/* memory: what fawn remembers about a user across threads, as facts
 * (store.h keeps them, per owner). Two texts cross the model boundary here,
 * and each is guarded by the function that makes or reads it:
 *
 * - Facts given to the model (memory_context) are data, not instructions:
 *   each fact is a JSON string whose '<' and '>' are escaped, between
 *   markers no fact can write, within a byte budget.
 * - Facts the model answers (memory_facts_parse) are untrusted model
 *   output: bounded in size and count, each fact validated as the store
 *   validates one (store_fact_check), anything else dropped.
 *
 * Every out-parameter is set on every path (NULL, 0). */
#ifndef FAWN_MEMORY_H
#define FAWN_MEMORY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "base/base.h"

/* Bytes a token takes, to turn memory.max_injection_tokens into bytes: 4
 * is the usual figure for English text with OpenAI's tokenizers. */
#define MEMORY_BYTES_PER_TOKEN 4
/* The largest answer of the extraction call read: 20 facts of 1000 bytes
 * with their JSON fit in 64 KiB; a longer answer is refused whole. */
#define MEMORY_ANSWER_MAX ((size_t)64 << 10)
/* Facts one answer may add at most; the rest are dropped. One turn tells
 * a handful of things about a user. */
#define MEMORY_ANSWER_FACTS_MAX 20
/* Bytes of the turn the extraction call reads (the user's message and the
 * replies' text, each cut to its share): 16 KiB holds a whole exchange of
 * ordinary length and bounds the call's cost. */
#define MEMORY_TURN_MAX ((size_t)16 << 10)

/* The hidden context a run gives the model: today's date (UTC, from
 * now_ms) and the facts that fit in max_bytes, most confident first, newer
 * first among equals, each as a JSON string with '<' and '>' escaped,
 * between "<memory>" and "</memory>" with a line saying they are data.
 * facts[0..n) is reordered. *out is malloc'd (caller frees). */
FAWN_MUST_CHECK int memory_context(char **out, store_fact *facts, size_t n, size_t max_bytes,
                                   int64_t now_ms);

/* Reads the extraction call's answer: text (len bytes; a JSON object, as
 * is or in a ``` fence, with prose around it) whose "facts" is a list of
 * {content, category?, confidence?}. Each kept fact has its content
 * trimmed, category lowered (default "context"), confidence from 0 to 1
 * (default 0.5) and source; an entry that store_fact_check refuses is
 * dropped, and entries past MEMORY_ANSWER_FACTS_MAX. *out is a malloc'd
 * array of *n (caller frees; NULL when none). FAWN_EINVAL for an answer
 * that is longer than MEMORY_ANSWER_MAX or holds no such object. */
FAWN_MUST_CHECK int memory_facts_parse(store_fact **out, size_t *n, const char *text, size_t len,
                                       const char *source);

/* The OpenAI messages of the extraction call (a new array): a system
 * message saying what to answer, and a user message holding, as JSON data
 * between markers, the facts already kept (so they are not answered
 * again) and the turn: the last human message of messages (stored
 * LangChain-shaped) and the text of the AI replies after it, at most
 * MEMORY_TURN_MAX bytes. FAWN_ENOENT when messages hold no human message
 * followed by a reply. */
FAWN_MUST_CHECK int memory_extract_request(json_t **out, const json_t *messages,
                                           const store_fact *facts, size_t n);

#endif
