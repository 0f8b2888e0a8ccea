/*  gw_snapstamp - "this state file was hashed, and matched": a snapshot's
    verification stamp.

    Starting from a snapshot checks its RAM state against meta.json's
    SHA-256 before any port opens (~0.2 s per 250 MB, each time, of a start
    that targets 1 s). The stamp (verified.json beside meta.json) records
    that hash with the state file's identity: device, inode, size, mtime and
    ctime. While all of those are unchanged the file is the one that was
    hashed, and the hash is skipped; any write, truncation, copy, move to
    another file system or new hard link changes one of them, and the next
    start hashes again. What it does not catch: a file changed without its
    ctime changing (bit rot under the file system; root setting the clock).
    The gateway that takes a snapshot writes the stamp with the hash it
    computed; a start that hashed writes it when the store lets it.
*/
#ifndef GW_SNAPSTAMP_H
#define GW_SNAPSTAMP_H
#include <stdbool.h>

#define GW_SNAPSTAMP_FILE "verified.json"  //  the state's; another file X's: verified-X.json

//  True when dir's stamp says state (a path) hashed to sha and the file is
//  still that one.
bool gw_snapstamp_matches (const char *dir, const char *state, const char *sha);

//  Record that state hashed to sha, atomically (a temporary file renamed);
//  0 or a negative errno (a read-only store is not an error to report).
int gw_snapstamp_write (const char *dir, const char *state, const char *sha);

#endif
