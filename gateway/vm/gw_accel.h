/*  gw_accel - which accelerator QEMU gets, and the host facts behind it.

    KVM only where it is real hardware virtualisation: /dev/kvm opens
    read-write AND the CPU flags show vmx or svm. A /dev/kvm without them is
    PVM or nested virtualisation, which cannot run a stock Debian guest
    kernel (it hangs in the decompressor or dies on cmpxchg16b/xrstor), so
    TCG is chosen there. A flag (auto|kvm|tcg) overrides the choice.

    The decision and the parsers are pure (unit-tested with canned text);
    gw_accel_probe and gw_accel_tsc_khz read the host.
*/
#ifndef GW_ACCEL_H
#define GW_ACCEL_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { GW_ACCEL_AUTO = 0, GW_ACCEL_KVM, GW_ACCEL_TCG } gw_accel_t;

//  What the host offers, as gw_accel_probe finds it.
typedef struct {
    bool kvm_present;                           //  /dev/kvm exists
    int kvm_errno;                              //  0 when it opened O_RDWR, else errno
    bool cpuinfo_ok;                            //  /proc/cpuinfo was readable
    const char *hwvirt;                         //  "vmx", "svm" or NULL (static string)
} gw_accel_probe_t;

//  "auto", "kvm", "tcg" (exact, lower case) -> gw_accel_t; -EINVAL otherwise.
int gw_accel_parse (const char *name);

//  "auto", "kvm", "tcg".
const char *gw_accel_name (gw_accel_t accel);

//  Fill probe from /dev/kvm and /proc/cpuinfo. Never fails: what cannot be
//  read counts as absent.
void gw_accel_probe (gw_accel_probe_t *probe);

//  Pure decision. Returns GW_ACCEL_KVM or GW_ACCEL_TCG and writes a one-line
//  reason for the log, e.g. "tcg: /dev/kvm present but cpu has no vmx/svm
//  (PVM or nested); guests run ~10x slower". Returns -ENODEV (reason says
//  why) when kvm is forced but /dev/kvm cannot be opened read-write.
int gw_accel_choose (gw_accel_t want, const gw_accel_probe_t *probe,
                     char *reason, size_t cap);

//  "vmx" or "svm" when the first "flags" line of cpuinfo text has that
//  exact word, else NULL.
const char *gw_accel_cpuinfo_hwvirt (const char *cpuinfo);

//  Host TSC rate in kHz from the text of
//  /sys/devices/system/cpu/cpu0/tsc_freq_khz (may be NULL) or else the first
//  "cpu MHz" line of cpuinfo text (may be NULL) times 1000. 0 when neither
//  gives a plausible rate (100 MHz .. 20 GHz).
unsigned gw_accel_tsc_khz_parse (const char *sysfs_khz, const char *cpuinfo);

//  gw_accel_tsc_khz_parse on this host's files.
unsigned gw_accel_tsc_khz (void);

//  The host CPU's model ("vendor_id model name") from the first processor
//  of cpuinfo text: what a KVM guest with -cpu host sees, so what a KVM
//  snapshot needs again. "" when cpuinfo has neither field.
void gw_accel_cpu_model_parse (const char *cpuinfo, char *out, size_t cap);
void gw_accel_cpu_model (char *out, size_t cap);

#endif
