/*  test_gw_egress - the egress policy: lists read into rules (and shown
    back in their normal form), every way a rule is refused, and verdicts:
    names exact and below a domain, ports, deny before allow, addresses a
    guest may reach only when an operator's address rule names them (also
    when a public name resolves to one, or IPv4 hides in IPv6), and a
    client's list that narrows and never widens.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/gw_egress.h"

static gw_egress_addr_t
s_addr (const char *text)
{
    gw_egress_addr_t a = { 0 };
    a.family = strchr (text, ':') ? 6 : 4;
    assert_int_equal (inet_pton (a.family == 6 ? AF_INET6 : AF_INET, text, a.bytes), 1);
    return a;
}

static gw_egress_t *
s_policy (const char *allow, const char *deny)
{
    char err [512] = "";
    gw_egress_t *p = gw_egress_new (allow, deny, err, sizeof err);
    if (!p)
        fail_msg ("%s", err);
    return p;
}

//  The verdict for name (NULL: a literal) at addr:port; its reason must contain want.
static void
s_expect (const gw_egress_t *p, const char *name, const char *addr, unsigned port, bool ok,
          const char *want)
{
    char reason [512] = "";
    gw_egress_addr_t a = s_addr (addr);
    bool got = gw_egress_check (p, name, &a, port, reason, sizeof reason);
    if (got != ok || !strstr (reason, want))
        fail_msg ("%s %s:%u: got %s \"%s\", want %s with \"%s\"", name ? name : "-", addr, port,
                  got ? "allowed" : "refused", reason, ok ? "allowed" : "refused", want);
}

static void
test_a_list_reads_back_in_its_normal_form (void **state)
{
    (void) state;
    gw_egress_t *p = s_policy (" PyPI.org., *.pythonhosted.org:443 ,10.1.2.0/24:5432,"
                               "127.0.0.1:8080,[2001:DB8::7]:443,[fd00::/8],,*:443",
                               "evil.example.org");
    char out [1024];
    int n = gw_egress_format (p, out, sizeof out);
    assert_string_equal (out, "{\"allow\": \"pypi.org,*.pythonhosted.org:443,10.1.2.0/24:5432,"
                         "127.0.0.1:8080,[2001:db8::7]:443,[fd00::/8],*:443\", "
                         "\"deny\": \"evil.example.org\"}");
    assert_int_equal (n, (int) strlen (out));
    assert_true (gw_egress_format (p, out, 8) > 8);     //  as snprintf: what it needed
    assert_int_equal (strlen (out), 7);
    gw_egress_destroy (&p);
    assert_null (p);
}

static void
test_a_bad_rule_is_refused_and_named (void **state)
{
    (void) state;
    const char *bad [][2] = {
        { "pypi.org:0", "port must be a number from 1 to 65535" },
        { "pypi.org:65536", "port must be" }, { "pypi.org:http", "port must be" },
        { "10.1.2.3/24", "host bits set (the network is 10.1.2.0/24)" },
        { "10.1.2.0/33", "not an address or network" },
        { "10.1.2.0/", "not an address or network" },
        { "[::1", "[ADDRESS] or [ADDRESS]:PORT" }, { "[::1]x", "[ADDRESS]" },
        { "[10.0.0.1]", "not an address or network" },
        { "exa mple.org", "not a domain, address or network" },
        { "*.", "is not a domain" }, { "a..b", "not a domain" },
        { "1.2.3", "not an address or network" }, { "-:", "port must be" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        char err [512] = "";
        gw_egress_t *p = gw_egress_new (bad [i][0], NULL, err, sizeof err);
        if (p || !strstr (err, bad [i][1]) || !strstr (err, "--egress-allow"))
            fail_msg ("\"%s\": %s \"%s\"", bad [i][0], p ? "accepted" : "refused with", err);
    }
    char label [80], err [512];
    memset (label, 'a', 64);
    snprintf (label + 64, sizeof label - 64, ".org");
    assert_null (gw_egress_new (NULL, label, err, sizeof err));
    assert_non_null (strstr (err, "--egress-deny"));
    size_t cap = GW_EGRESS_RULES_MAX * 4 + 16;
    char *many = calloc (1, cap);
    for (int i = 0; i <= GW_EGRESS_RULES_MAX; i++)
        strcat (many, i ? ",a.b" : "a.b");
    assert_null (gw_egress_new (many, NULL, err, sizeof err));
    assert_non_null (strstr (err, "more than 256 rules"));
    free (many);
}

static void
test_names_ports_and_deny_before_allow (void **state)
{
    (void) state;
    gw_egress_t *p = s_policy ("pypi.org,*.pythonhosted.org:443,api.example.com:8443",
                               "bad.pythonhosted.org");
    s_expect (p, "pypi.org", "151.101.0.223", 443, true, "by the rule pypi.org");
    s_expect (p, "PyPI.org.", "151.101.0.223", 80, true, "pypi.org");
    s_expect (p, "files.pythonhosted.org", "151.101.1.63", 443, true, "*.pythonhosted.org:443");
    s_expect (p, "files.pythonhosted.org", "151.101.1.63", 80, false, "port 80 is not allowed "
              "(the rule *.pythonhosted.org:443 allows port 443)");
    s_expect (p, "pythonhosted.org", "151.101.1.63", 443, false, "matches no rule");
    s_expect (p, "xpythonhosted.org", "151.101.1.63", 443, false, "matches no rule");
    s_expect (p, "bad.pythonhosted.org", "151.101.1.63", 443, false,
              "matches the deny rule bad.pythonhosted.org");
    s_expect (p, "api.example.com", "93.184.215.14", 8443, true, "api.example.com:8443");
    s_expect (p, "api.example.com", "93.184.215.14", 443, false, "port 443 is not allowed (the rule api.example.com:8443");
    s_expect (p, NULL, "151.101.0.223", 443, false, "151.101.0.223:443 matches no rule");
    char reason [256];
    assert_false (gw_egress_check_name (p, "bad.pythonhosted.org", 443, reason, sizeof reason));
    assert_non_null (strstr (reason, "deny rule"));
    assert_false (gw_egress_check_name (p, "example.net", 443, reason, sizeof reason));
    assert_true (gw_egress_check_name (p, "pypi.org", 443, reason, sizeof reason));
    assert_false (gw_egress_check_name (p, "a b", 443, reason, sizeof reason));
    assert_non_null (strstr (reason, "not a domain name"));
    gw_egress_destroy (&p);
}

static void
test_private_addresses_need_an_operators_address_rule (void **state)
{
    (void) state;
    gw_egress_t *p = s_policy ("*,pypi.org,127.0.0.1:8080,10.1.2.0/24:5432,[fd00:ec2::254]:80",
                               NULL);
    //  A public name that resolves to a private address is refused after resolution.
    s_expect (p, "pypi.org", "10.0.0.1", 443, false, "private, link-local or reserved");
    const char *inner [] = { "127.0.0.1", "169.254.169.254", "192.168.1.1", "172.16.0.1",
                             "100.64.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1",
                             "::", "fe80::1", "fd00:ec2::254", "::ffff:127.0.0.1",
                             "64:ff9b::a00:1", "2002:a00:1::", "ff02::1" };
    for (size_t i = 0; i < sizeof inner / sizeof inner [0]; i++) {
        gw_egress_addr_t a = s_addr (inner [i]);
        assert_true (gw_egress_addr_private (&a));
        s_expect (p, NULL, inner [i], 443, false, "only an operator's rule naming that address");
    }
    s_expect (p, NULL, "127.0.0.1", 8080, true, "by the rule 127.0.0.1:8080");
    s_expect (p, "localhost", "127.0.0.1", 8080, true, "127.0.0.1:8080");
    s_expect (p, "pypi.org", "127.0.0.1", 443, false, "is a loopback, private");  //  by name
    s_expect (p, NULL, "::ffff:127.0.0.1", 8080, true, "127.0.0.1:8080");
    s_expect (p, NULL, "127.0.0.1", 8081, false, "only an operator's rule");  //  * matched
    s_expect (p, NULL, "127.0.0.2", 8080, false, "only an operator's rule");
    s_expect (p, NULL, "10.1.2.9", 5432, true, "10.1.2.0/24:5432");
    s_expect (p, NULL, "10.1.3.9", 5432, false, "private");
    s_expect (p, NULL, "fd00:ec2::254", 80, true, "[fd00:ec2::254]:80");
    s_expect (p, NULL, "93.184.215.14", 443, true, "by the rule *");
    s_expect (p, NULL, "2606:2800:21f:cb07:6820:80da:af6b:8b2c", 443, true, "by the rule *");
    gw_egress_destroy (&p);
    p = s_policy ("*", "*");                    //  deny * is the off switch
    s_expect (p, "pypi.org", "151.101.0.223", 443, false, "deny rule *");
    gw_egress_destroy (&p);
    p = s_policy (NULL, NULL);                  //  and no allow rule is off too
    s_expect (p, "pypi.org", "151.101.0.223", 443, false, "matches no rule");
    gw_egress_destroy (&p);
}

static void
test_a_clients_list_only_narrows (void **state)
{
    (void) state;
    gw_egress_t *p = s_policy ("pypi.org,*.pythonhosted.org,127.0.0.1:8080", NULL);
    char err [512] = "";
    assert_int_equal (gw_egress_narrow (p, "*.pythonhosted.org:443,evil.org,127.0.0.1", err,
                                        sizeof err), 0);
    s_expect (p, "files.pythonhosted.org", "151.101.1.63", 443, true, "*.pythonhosted.org:443");
    s_expect (p, "files.pythonhosted.org", "151.101.1.63", 80, false, "CELLVM_EGRESS_ALLOW");
    s_expect (p, "pypi.org", "151.101.0.223", 443, false, "CELLVM_EGRESS_ALLOW");
    s_expect (p, "evil.org", "1.2.3.4", 443, false, "no rule of --egress-allow");
    s_expect (p, NULL, "127.0.0.1", 8080, true, "127.0.0.1");
    s_expect (p, NULL, "127.0.0.1", 9000, false, "port 9000 is not allowed");
    char out [512];
    gw_egress_format (p, out, sizeof out);
    assert_non_null (strstr (out, "\"client_allow\": \"*.pythonhosted.org:443,evil.org,"
                                  "127.0.0.1\""));
    //  A bad client list changes nothing; an empty one removes the narrowing.
    assert_int_equal (gw_egress_narrow (p, "pypi.org:99999", err, sizeof err), -EINVAL);
    assert_non_null (strstr (err, "CELLVM_EGRESS_ALLOW: rule \"pypi.org:99999\""));
    s_expect (p, "pypi.org", "151.101.0.223", 443, false, "CELLVM_EGRESS_ALLOW");
    //  A client's * is any public address, as an operator's: not the private one the
    //  operator opened, nor a name resolving to it.
    assert_int_equal (gw_egress_narrow (p, "*", err, sizeof err), 0);
    s_expect (p, "pypi.org", "151.101.0.223", 443, true, "by the rule *");
    s_expect (p, NULL, "127.0.0.1", 8080, false, "needs an address rule there too");
    assert_int_equal (gw_egress_narrow (p, "", err, sizeof err), 0);
    s_expect (p, "pypi.org", "151.101.0.223", 443, true, "by the rule pypi.org");
    gw_egress_format (p, out, sizeof out);
    assert_null (strstr (out, "client_allow"));
    gw_egress_destroy (&p);
}

static void
test_names_are_normalized_or_refused (void **state)
{
    (void) state;
    char out [GW_EGRESS_NAME_MAX + 1], long_label [80];
    assert_int_equal (gw_egress_name ("Files.PythonHosted.ORG.", out, sizeof out), 0);
    assert_string_equal (out, "files.pythonhosted.org");
    const char *bad [] = { "", ".", "a..b", ".a", "a/b", "a b", "a:1", "é.org", NULL };
    for (size_t i = 0; bad [i]; i++)
        assert_int_equal (gw_egress_name (bad [i], out, sizeof out), -EINVAL);
    assert_int_equal (gw_egress_name (NULL, out, sizeof out), -EINVAL);
    memset (long_label, 'a', 63);
    strcpy (long_label + 63, ".org");
    assert_int_equal (gw_egress_name (long_label, out, sizeof out), 0);
    memmove (long_label + 1, long_label, strlen (long_label) + 1);
    assert_int_equal (gw_egress_name (long_label, out, sizeof out), -EINVAL);
    assert_int_equal (gw_egress_name ("pypi.org", out, 4), -EINVAL);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_a_list_reads_back_in_its_normal_form),
        cmocka_unit_test (test_a_bad_rule_is_refused_and_named),
        cmocka_unit_test (test_names_ports_and_deny_before_allow),
        cmocka_unit_test (test_private_addresses_need_an_operators_address_rule),
        cmocka_unit_test (test_a_clients_list_only_narrows),
        cmocka_unit_test (test_names_are_normalized_or_refused),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
