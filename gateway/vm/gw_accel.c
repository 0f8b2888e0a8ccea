/*  gw_accel - which accelerator QEMU gets, and the host facts behind it.

    Host files are read with a bound: only the first CPU's block of
    /proc/cpuinfo matters, and it is a few KiB on any machine.
*/
#include "vm/gw_accel.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_CPUINFO_MAX 65536                     //  bytes of /proc/cpuinfo read
#define S_TSC_MIN_KHZ 100000u                   //  plausible TSC rates
#define S_TSC_MAX_KHZ 20000000u
#define S_SLOW "guests run ~10x slower"

static const char *s_names [] = { "auto", "kvm", "tcg" };

int
gw_accel_parse (const char *name)
{
    for (int i = GW_ACCEL_AUTO; name && i <= GW_ACCEL_TCG; i++)
        if (strcmp (name, s_names [i]) == 0)
            return i;
    return -EINVAL;
}

const char *
gw_accel_name (gw_accel_t accel)
{
    assert (accel >= GW_ACCEL_AUTO && accel <= GW_ACCEL_TCG);
    return s_names [accel];
}

//  --------------------------------------------------------------------------
//  Read at most cap - 1 bytes of a file into a NUL-terminated buffer the
//  caller frees. NULL when it cannot be read.

static char *
s_read_text (const char *path, size_t cap)
{
    char *buf = NULL;
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        goto fail;
    buf = malloc (cap);
    if (!buf)
        abort ();
    size_t len = 0;
    while (len < cap - 1) {
        ssize_t n = read (fd, buf + len, cap - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto fail;
        if (n == 0)
            break;
        len += (size_t) n;
    }
    buf [len] = 0;
    close (fd);
    return buf;
fail:
    free (buf);
    if (fd >= 0)
        close (fd);
    return NULL;
}

//  Start of the first line beginning with key (then blanks and ':'), or
//  NULL; *value_p points after the colon.
static const char *
s_find_field (const char *text, const char *key, const char **value_p)
{
    size_t klen = strlen (key);
    for (const char *line = text; line && *line; ) {
        if (strncmp (line, key, klen) == 0) {
            const char *p = line + klen;
            while (*p == ' ' || *p == '\t')
                p++;
            if (*p == ':') {
                *value_p = p + 1;
                return line;
            }
        }
        line = strchr (line, '\n');
        if (line)
            line++;
    }
    return NULL;
}

const char *
gw_accel_cpuinfo_hwvirt (const char *cpuinfo)
{
    const char *p = NULL;
    if (!cpuinfo || !s_find_field (cpuinfo, "flags", &p))
        return NULL;
    while (*p && *p != '\n') {
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn (p, " \t\n");
        if (n == 3 && strncmp (p, "vmx", 3) == 0)
            return "vmx";
        if (n == 3 && strncmp (p, "svm", 3) == 0)
            return "svm";
        p += n;
    }
    return NULL;
}

void
gw_accel_probe (gw_accel_probe_t *probe)
{
    assert (probe);
    memset (probe, 0, sizeof *probe);
    probe->kvm_present = access ("/dev/kvm", F_OK) == 0;
    int fd = open ("/dev/kvm", O_RDWR | O_CLOEXEC);
    probe->kvm_errno = fd >= 0 ? 0 : errno;
    if (fd >= 0)
        close (fd);
    char *cpuinfo = s_read_text ("/proc/cpuinfo", S_CPUINFO_MAX);
    probe->cpuinfo_ok = cpuinfo != NULL;
    probe->hwvirt = gw_accel_cpuinfo_hwvirt (cpuinfo);
    free (cpuinfo);
}

//  --------------------------------------------------------------------------
//  The decision.

static int
s_choose_forced_kvm (const gw_accel_probe_t *probe, char *reason, size_t cap)
{
    if (probe->kvm_errno) {
        snprintf (reason, cap, "kvm forced but /dev/kvm cannot be opened read-write: %s",
                  strerror (probe->kvm_errno));
        return -ENODEV;
    }
    if (probe->hwvirt)
        snprintf (reason, cap, "kvm: forced by flag (cpu has %s)", probe->hwvirt);
    else
        snprintf (reason, cap, "kvm: forced by flag although cpu has no vmx/svm "
                  "(PVM or nested: a stock guest kernel may hang)");
    return GW_ACCEL_KVM;
}

int
gw_accel_choose (gw_accel_t want, const gw_accel_probe_t *probe, char *reason, size_t cap)
{
    assert (probe && reason && cap > 0);
    if (want == GW_ACCEL_TCG) {
        snprintf (reason, cap, "tcg: forced by flag; " S_SLOW);
        return GW_ACCEL_TCG;
    }
    if (want == GW_ACCEL_KVM)
        return s_choose_forced_kvm (probe, reason, cap);
    assert (want == GW_ACCEL_AUTO);
    if (!probe->kvm_present)
        snprintf (reason, cap, "tcg: no /dev/kvm%s; " S_SLOW,
                  probe->hwvirt ? " although cpu has vmx/svm (load kvm_intel/kvm_amd)" : "");
    else if (probe->kvm_errno)
        snprintf (reason, cap, "tcg: /dev/kvm cannot be opened read-write (%s); " S_SLOW,
                  strerror (probe->kvm_errno));
    else if (!probe->hwvirt)
        snprintf (reason, cap, "tcg: /dev/kvm present but cpu has no vmx/svm "
                  "(PVM or nested); " S_SLOW);
    else {
        snprintf (reason, cap, "kvm: /dev/kvm usable and cpu has %s", probe->hwvirt);
        return GW_ACCEL_KVM;
    }
    return GW_ACCEL_TCG;
}

//  --------------------------------------------------------------------------
//  Host TSC rate, for the guest's tsc_early_khz: under TCG a guest left to
//  calibrate against the emulated PIT hangs in 5 boots out of 8.

//  "2096.017" -> 2096017 (kHz), without floating point or locale; 0 if bad.
static unsigned
s_parse_mhz (const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    unsigned long long khz = 0;
    int digits = 0, decimals = -1;
    for (; *p && *p != '\n' && *p != ' ' && *p != '\t' && *p != '\r'; p++) {
        if (*p == '.' && decimals < 0)
            decimals = 0;
        else if (*p >= '0' && *p <= '9') {
            if (decimals >= 3)
                continue;                       //  finer than 1 kHz
            if (++digits > 9)
                return 0;
            khz = khz * 10 + (unsigned) (*p - '0');
            if (decimals >= 0)
                decimals++;
        }
        else
            return 0;
    }
    for (int d = decimals < 0 ? 0 : decimals; d < 3; d++)
        khz *= 10;
    return digits && khz <= S_TSC_MAX_KHZ ? (unsigned) khz : 0;
}

unsigned
gw_accel_tsc_khz_parse (const char *sysfs_khz, const char *cpuinfo)
{
    if (sysfs_khz) {
        char *end = NULL;
        errno = 0;
        unsigned long v = strtoul (sysfs_khz, &end, 10);
        if (!errno && end != sysfs_khz && (*end == 0 || *end == '\n')
        &&  v >= S_TSC_MIN_KHZ && v <= S_TSC_MAX_KHZ)
            return (unsigned) v;
    }
    const char *value = NULL;
    if (cpuinfo && s_find_field (cpuinfo, "cpu MHz", &value)) {
        unsigned khz = s_parse_mhz (value);
        if (khz >= S_TSC_MIN_KHZ)
            return khz;
    }
    return 0;
}

//  A cpuinfo field's value, trimmed, up to its line's end.
static void
s_field_text (const char *cpuinfo, const char *key, char *out, size_t cap)
{
    const char *v = NULL;
    out [0] = '\0';
    if (!cpuinfo || !s_find_field (cpuinfo, key, &v))
        return;
    v += strspn (v, " \t");
    size_t n = strcspn (v, "\n");
    while (n > 0 && (v [n - 1] == ' ' || v [n - 1] == '\t'))
        n--;
    snprintf (out, cap, "%.*s", (int) n, v);
}

void
gw_accel_cpu_model_parse (const char *cpuinfo, char *out, size_t cap)
{
    assert (out && cap > 0);
    char vendor [64], model [192];
    s_field_text (cpuinfo, "vendor_id", vendor, sizeof vendor);
    s_field_text (cpuinfo, "model name", model, sizeof model);
    snprintf (out, cap, "%s%s%s", vendor, vendor [0] && model [0] ? " " : "", model);
}

void
gw_accel_cpu_model (char *out, size_t cap)
{
    char *cpuinfo = s_read_text ("/proc/cpuinfo", S_CPUINFO_MAX);
    gw_accel_cpu_model_parse (cpuinfo, out, cap);
    free (cpuinfo);
}

unsigned
gw_accel_tsc_khz (void)
{
    char *sysfs = s_read_text ("/sys/devices/system/cpu/cpu0/tsc_freq_khz", 64);
    char *cpuinfo = s_read_text ("/proc/cpuinfo", S_CPUINFO_MAX);
    unsigned khz = gw_accel_tsc_khz_parse (sysfs, cpuinfo);
    free (sysfs);
    free (cpuinfo);
    return khz;
}
