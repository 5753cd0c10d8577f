/* Replays: a run that starts from an earlier checkpoint of its thread (a
 * fork), and what a client asks before it starts one to regenerate the
 * latest answer, or to edit the latest question and run it again
 * (DeerFlow's POST .../runs/regenerate/prepare and
 * .../runs/edit-regenerate/prepare, replay_routes.c).
 *
 * The rules, each with the function that holds it:
 * - a run names the checkpoint it starts from with LangGraph's
 *   `checkpoint` or `checkpoint_id`, a checkpoint id of the root namespace
 *   (gw_run_checkpoint_parse); the store finds it only among the caller's
 *   own thread's checkpoints (store_checkpoint_get);
 * - only the latest visible answer may be regenerated
 *   (gw_replay_pick_regenerate); only the latest visible question, whose
 *   answer is complete text, may be edited (gw_replay_pick_edit);
 * - a replay starts from the checkpoint just before the question it
 *   repeats, on the lineage of the thread's newest state
 *   (store_checkpoint_origin), so a sibling branch is never taken.
 *
 * A message is visible when it is a human or ai message that is not
 * hidden (additional_kwargs.hide_from_ui) and not a summary (name
 * "summary"): DeerFlow's rule for what its UI shows.
 *
 * Every out-parameter is set on every path, failures included. */
#ifndef FAWN_GATEWAY_REPLAY_H
#define FAWN_GATEWAY_REPLAY_H

#include <jansson.h>
#include <stddef.h>

#include "store/store.h"
#include "base/base.h"

/* The checkpoint a run body names (`checkpoint_id`, or `checkpoint`:
 * {checkpoint_id, checkpoint_ns?, checkpoint_map?, thread_id?}) into out,
 * "" when it names none (absent, null, or a null checkpoint_id: the
 * thread's newest state, as LangGraph takes them); *thread_id gets
 * checkpoint.thread_id (borrowed from body) or NULL, for the caller to
 * hold against the run's thread. FAWN_EINVAL naming what is wrong: an id
 * that is not [A-Za-z0-9_-]{1,64}, a namespace other than "", a non-empty
 * checkpoint_map, another key, or two different ids. */
FAWN_MUST_CHECK int gw_run_checkpoint_parse(char out[STORE_RUN_ID_MAX + 1], const char **thread_id,
                                            const json_t *body);

/* For regenerating the message of id message_id in messages (a state's
 * list): *ai gets its index and *human the index of the visible human
 * message before it. FAWN_ENOENT when no message has that id; FAWN_EBUSY
 * (409) with DeerFlow's words when it is not a visible ai message, not the
 * latest one, or no visible human message comes before it. */
FAWN_MUST_CHECK int gw_replay_pick_regenerate(size_t *ai, size_t *human, const json_t *messages,
                                              const char *message_id);

/* The index of the latest visible human message of messages into *human;
 * FAWN_ENOENT when there is none. */
FAWN_MUST_CHECK int gw_replay_latest_human(size_t *human, const json_t *messages);

/* The replacement text of an edit with the white space at its ends
 * trimmed (malloc'd into *out). FAWN_EBUSY (409, DeerFlow's "Edited
 * message cannot be empty") when nothing is left. */
FAWN_MUST_CHECK int gw_replay_edit_text(char **out, const char *replacement);

/* For editing the human message of id human_id to text (already trimmed,
 * non-empty): *human gets its index and *ai the index of its answer.
 * FAWN_EBUSY (409) with DeerFlow's words when it is not the latest
 * visible human message, when the last visible ai message after it is not
 * complete text (text, no tool calls), or when text is its text already. */
FAWN_MUST_CHECK int gw_replay_pick_edit(size_t *human, size_t *ai, const json_t *messages,
                                        const char *human_id, const char *text);

/* The human message a replay sends again, made from source (a stored
 * human message): its id (id when not NULL, else source's), its content
 * ([{"type":"text","text":text}] when text is not NULL, else source's),
 * its name and its additional_kwargs.files; nothing else. A new
 * reference, or NULL when out of memory. */
json_t *gw_replay_human(const json_t *source, const char *id, const char *text);

/* The text of a message's content: the string, or its text parts joined
 * (malloc'd; NULL when out of memory). */
char *gw_replay_text(const json_t *message);

#endif
