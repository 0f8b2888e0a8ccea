/*  gw_qemuver - which QEMU build a binary is, before any VM runs.

    A snapshot restores only on the QEMU build that wrote it (the microvm
    machine type keeps no migration compatibility across versions). A
    snapshot records QMP's query-version ("7.2.22 Debian 1:7.2+dfsg-...",
    the version and the distribution's package); a start from it reads the
    same words from `qemu --version`, so a session that moved to a host
    with another build is refused before any port opens, in words, and the
    orchestrator can place it elsewhere. The resumed QEMU's own
    query-version stays the last word (a wrapper may not answer --version).
*/
#ifndef GW_QEMUVER_H
#define GW_QEMUVER_H

#include <stddef.h>

//  The words of query-version from `--version`'s first line ("QEMU emulator
//  version 7.2.22 (Debian 1:7.2+dfsg-7)" -> "7.2.22 Debian 1:7.2+dfsg-7").
//  0, or -EINVAL when text is not QEMU's.
int gw_qemuver_parse (const char *text, char *out, size_t cap);

//  Run `qemu --version` (qemu found on PATH when it has no slash), at most
//  timeout_ms, and parse it. 0, or -errno (it could not be asked).
int gw_qemuver_of (const char *qemu, int timeout_ms, char *out, size_t cap);

#endif
