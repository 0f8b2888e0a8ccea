/*  gw_qemuver - which QEMU build a binary is (see gw_qemuver.h). */
#include "vm/gw_qemuver.h"
#include "base/gw_runout.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define S_PREFIX "QEMU emulator version "

int
gw_qemuver_parse (const char *text, char *out, size_t cap)
{
    assert (out && cap > 0);
    out [0] = '\0';
    const char *p = text ? strstr (text, S_PREFIX) : NULL;
    if (!p || (p != text && p [-1] != '\n'))
        return -EINVAL;
    p += strlen (S_PREFIX);
    size_t ver = strspn (p, "0123456789.");
    if (ver == 0 || ver > 32)
        return -EINVAL;
    //  " (PACKAGE)" on the same line, when the build names one.
    const char *pkg = p + ver, *nl = strchr (pkg, '\n');
    const char *close = strchr (pkg, ')');
    size_t pkg_len = 0;
    if (pkg [0] == ' ' && pkg [1] == '(' && close && (!nl || close < nl)) {
        pkg += 2;
        pkg_len = (size_t) (close - pkg);
    }
    int n = snprintf (out, cap, "%.*s %.*s", (int) ver, p, (int) pkg_len, pkg);
    return n > 0 && (size_t) n < cap ? 0 : -ENAMETOOLONG;
}

int
gw_qemuver_of (const char *qemu, int timeout_ms, char *out, size_t cap)
{
    char *argv [] = { (char *) (qemu ? qemu : "qemu-system-x86_64"), "--version", NULL };
    char text [1024];
    int rc = gw_runout (argv, NULL, text, sizeof text, timeout_ms);
    if (rc > 0)
        return -ENOEXEC;
    return rc < 0 ? rc : gw_qemuver_parse (text, out, cap);
}
