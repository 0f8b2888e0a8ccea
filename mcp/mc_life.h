/*  mc_life - the end of a session, in words. Pure.

    A gateway ends its own session when --idle-timeout or --ttl runs out
    (docs/sessions.md, "Lifetimes"). It says so once, on IOPub: a `stream`
    on stderr with no parent, "cellvm: this session was idle longer than
    its limit (--idle-timeout) (300 s) and is being shut down. ...", then
    exits 0. This module recognises that notice, and writes what a call on
    a session that ended by itself (that notice, a crash, a kill) is told:
    what happened, what was lost, what to do.
*/
#ifndef MC_LIFE_H
#define MC_LIFE_H

#include <stdbool.h>
#include <stddef.h>

#include "ch_msg.h"
#include "mc_tools.h"

//  What cellvm-mcp's --idle-timeout is when neither the option nor the
//  kernelspec sets one (seconds). --ttl has no such default.
#define MC_LIFE_IDLE_DEFAULT 1800.0

//  When the call learns of the end.
typedef enum {
    MC_LIFE_DURING,         //  the call was running (or starting) when it came
    MC_LIFE_BEFORE,         //  the session had already ended: the call was not run
} mc_life_when_t;

//  The gateway's notice that it is ending its session, when msg is one (an
//  IOPub stream on stderr with no parent whose text starts "cellvm: this
//  session "): into out (at most cap bytes, trailing white space removed),
//  and true. False otherwise.
bool mc_life_notice (const ch_msg_t *msg, char *out, size_t cap);

//  Why a session ended, as a clause: from the gateway's notice when there
//  is one (NULL or "" when none), else how its process ended (exited: "its
//  gateway process exited with status 1"). New string.
char *mc_life_why (const char *notice, const char *exited);

//  What a call of tool on session name is told: why is a clause from
//  mc_life_why; tail the end of the gateway's log (NULL or "": none). A
//  restart or close BEFORE gets its own sentence (nothing is left to
//  restart, or to close). New string.
char *mc_life_words (const char *name, mc_life_when_t when, mc_tool_t tool, const char *why,
                     const char *tail);

#endif
