/*  test_gw_accel - choosing KVM or TCG, and reading the host's TSC rate. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vm/gw_accel.h"

//  What these build machines look like: PVM's /dev/kvm, no vmx/svm.
static const gw_accel_probe_t s_pvm = { .kvm_present = true, .cpuinfo_ok = true };
static const gw_accel_probe_t s_intel = { .kvm_present = true, .cpuinfo_ok = true,
                                          .hwvirt = "vmx" };
static const gw_accel_probe_t s_no_kvm = { .kvm_errno = ENOENT, .cpuinfo_ok = true };
static const gw_accel_probe_t s_denied = { .kvm_present = true, .kvm_errno = EACCES,
                                           .cpuinfo_ok = true, .hwvirt = "svm" };

#define CPUINFO_PVM "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n" \
    "cpu MHz\t\t: 2096.017\nflags\t\t: fpu vme de pse tsc msr pae hypervisor svm_lock " \
    "tsc_known_freq\nbogomips\t: 4192.03\n\n"

static void
test_gw_accel_auto_picks_kvm_only_with_hardware_virtualisation (void **state)
{
    (void) state;
    char reason [256];
    assert_int_equal (gw_accel_choose (GW_ACCEL_AUTO, &s_intel, reason, sizeof reason),
                      GW_ACCEL_KVM);
    assert_string_equal (reason, "kvm: /dev/kvm usable and cpu has vmx");
    assert_int_equal (gw_accel_choose (GW_ACCEL_AUTO, &s_pvm, reason, sizeof reason),
                      GW_ACCEL_TCG);
    assert_string_equal (reason, "tcg: /dev/kvm present but cpu has no vmx/svm "
                         "(PVM or nested); guests run ~10x slower");
}

static void
test_gw_accel_auto_falls_back_to_tcg_and_says_why (void **state)
{
    (void) state;
    char reason [256];
    assert_int_equal (gw_accel_choose (GW_ACCEL_AUTO, &s_no_kvm, reason, sizeof reason),
                      GW_ACCEL_TCG);
    assert_string_equal (reason, "tcg: no /dev/kvm; guests run ~10x slower");
    assert_int_equal (gw_accel_choose (GW_ACCEL_AUTO, &s_denied, reason, sizeof reason),
                      GW_ACCEL_TCG);
    assert_non_null (strstr (reason, "tcg: /dev/kvm cannot be opened read-write"));
    assert_non_null (strstr (reason, "Permission denied"));
    gw_accel_probe_t hw_no_module = s_no_kvm;
    hw_no_module.hwvirt = "vmx";
    gw_accel_choose (GW_ACCEL_AUTO, &hw_no_module, reason, sizeof reason);
    assert_non_null (strstr (reason, "load kvm_intel/kvm_amd"));
}

static void
test_gw_accel_flag_overrides (void **state)
{
    (void) state;
    char reason [256];
    assert_int_equal (gw_accel_choose (GW_ACCEL_TCG, &s_intel, reason, sizeof reason),
                      GW_ACCEL_TCG);
    assert_string_equal (reason, "tcg: forced by flag; guests run ~10x slower");
    assert_int_equal (gw_accel_choose (GW_ACCEL_KVM, &s_pvm, reason, sizeof reason),
                      GW_ACCEL_KVM);
    assert_non_null (strstr (reason, "forced by flag although cpu has no vmx/svm"));
    assert_int_equal (gw_accel_choose (GW_ACCEL_KVM, &s_intel, reason, sizeof reason),
                      GW_ACCEL_KVM);
    //  Forcing KVM without a usable /dev/kvm is an error, not a silent TCG.
    assert_int_equal (gw_accel_choose (GW_ACCEL_KVM, &s_no_kvm, reason, sizeof reason),
                      -ENODEV);
    assert_non_null (strstr (reason, "kvm forced but /dev/kvm cannot be opened"));
}

static void
test_gw_accel_parses_names (void **state)
{
    (void) state;
    assert_int_equal (gw_accel_parse ("auto"), GW_ACCEL_AUTO);
    assert_int_equal (gw_accel_parse ("kvm"), GW_ACCEL_KVM);
    assert_int_equal (gw_accel_parse ("tcg"), GW_ACCEL_TCG);
    assert_int_equal (gw_accel_parse ("KVM"), -EINVAL);
    assert_int_equal (gw_accel_parse ("hvf"), -EINVAL);
    assert_int_equal (gw_accel_parse (NULL), -EINVAL);
    assert_string_equal (gw_accel_name (GW_ACCEL_TCG), "tcg");
}

static void
test_gw_accel_finds_vmx_or_svm_as_whole_flags (void **state)
{
    (void) state;
    assert_null (gw_accel_cpuinfo_hwvirt (CPUINFO_PVM));    //  svm_lock is not svm
    assert_string_equal (gw_accel_cpuinfo_hwvirt ("flags\t: fpu vmx sse\n"), "vmx");
    assert_string_equal (gw_accel_cpuinfo_hwvirt ("flags\t: fpu sse svm\n"), "svm");
    assert_null (gw_accel_cpuinfo_hwvirt ("flags\t: fpu vmxx xsvm\n"));
    assert_null (gw_accel_cpuinfo_hwvirt ("model name\t: vmx svm\n"));
    assert_null (gw_accel_cpuinfo_hwvirt ("flags\t: fpu\nflags\t: vmx\n"));  //  first cpu only
    assert_null (gw_accel_cpuinfo_hwvirt (""));
    assert_null (gw_accel_cpuinfo_hwvirt (NULL));
}

static void
test_gw_accel_reads_tsc_rate (void **state)
{
    (void) state;
    assert_int_equal (gw_accel_tsc_khz_parse ("2445428\n", CPUINFO_PVM), 2445428);
    assert_int_equal (gw_accel_tsc_khz_parse (NULL, CPUINFO_PVM), 2096017);
    assert_int_equal (gw_accel_tsc_khz_parse ("garbage", CPUINFO_PVM), 2096017);
    assert_int_equal (gw_accel_tsc_khz_parse ("5", CPUINFO_PVM), 2096017);  //  implausible
    assert_int_equal (gw_accel_tsc_khz_parse (NULL, "cpu MHz\t: 3000\n"), 3000000);
    assert_int_equal (gw_accel_tsc_khz_parse (NULL, "cpu MHz\t: 2445.4\n"), 2445400);
    assert_int_equal (gw_accel_tsc_khz_parse (NULL, "cpu MHz\t: 2445.42899\n"), 2445428);
    assert_int_equal (gw_accel_tsc_khz_parse (NULL, "cpu MHz\t: 99999999.0\n"), 0);
    assert_int_equal (gw_accel_tsc_khz_parse (NULL, "cpu MHz\t: 2x45\n"), 0);
    assert_int_equal (gw_accel_tsc_khz_parse (NULL, "cpu MHz\t: \n"), 0);
    assert_int_equal (gw_accel_tsc_khz_parse (NULL, NULL), 0);
}

static void
test_gw_accel_probes_this_host (void **state)
{
    (void) state;
    gw_accel_probe_t probe;
    gw_accel_probe (&probe);
    assert_true (probe.cpuinfo_ok);
    char reason [256];
    int accel = gw_accel_choose (GW_ACCEL_AUTO, &probe, reason, sizeof reason);
    //  What the rule says for this host's facts (a PVM /dev/kvm has no vmx/svm
    //  in cpuinfo, so this build machine must get TCG).
    int want = probe.kvm_present && !probe.kvm_errno && probe.hwvirt ? GW_ACCEL_KVM
                                                                      : GW_ACCEL_TCG;
    assert_int_equal (accel, want);
    assert_non_null (strstr (reason, want == GW_ACCEL_KVM ? "kvm" : "tcg"));
    print_message ("this host: %s (tsc %u kHz)\n", reason, gw_accel_tsc_khz ());
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_accel_auto_picks_kvm_only_with_hardware_virtualisation),
        cmocka_unit_test (test_gw_accel_auto_falls_back_to_tcg_and_says_why),
        cmocka_unit_test (test_gw_accel_flag_overrides),
        cmocka_unit_test (test_gw_accel_parses_names),
        cmocka_unit_test (test_gw_accel_finds_vmx_or_svm_as_whole_flags),
        cmocka_unit_test (test_gw_accel_reads_tsc_rate),
        cmocka_unit_test (test_gw_accel_probes_this_host),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
