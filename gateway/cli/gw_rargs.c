/*  gw_rargs - cellvm-remote's flags and environment (see gw_rargs.h).
*/
#include "cli/gw_rargs.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { S_KID, S_RESP, S_KEY, S_RANGE, S_IP, S_TIMEOUT, S_ENC, S_NSLOTS, S_IGNORED }
    s_slot_t;

//  Every option: its name after "--" (and after "--RemoteProcessProxy."
//  when old), and the environment variable behind it.
static const struct {
    const char *name;
    s_slot_t slot;
    bool old;                                   //  also as --RemoteProcessProxy.NAME
    const char *env;
} s_opts [] = {
    { "kernel-id", S_KID, true, "KERNEL_ID" },
    { "response-address", S_RESP, true, "RESPONSE_ADDRESS" },
    { "public-key", S_KEY, true, "PUBLIC_KEY" },
    { "port-range", S_RANGE, true, "PORT_RANGE" },
    { "ip", S_IP, false, "CELLVM_REMOTE_IP" },
    { "launch-timeout", S_TIMEOUT, false, "KERNEL_LAUNCH_TIMEOUT" },
    { "encryption", S_ENC, false, "CELLVM_REMOTE_ENCRYPTION" },
    { "spark-context-initialization-mode", S_IGNORED, true, NULL },
    { "cluster-type", S_IGNORED, true, NULL },
    { "kernel-class-name", S_IGNORED, true, NULL },
};
#define S_NOPTS (sizeof s_opts / sizeof s_opts [0])

static const char *
s_env (char *const *envp, const char *name)
{
    size_t n = strlen (name);
    for (size_t i = 0; envp && envp [i]; i++)
        if (strncmp (envp [i], name, n) == 0 && envp [i][n] == '=')
            return envp [i] + n + 1;
    return NULL;
}

//  The option arg names ("--kernel-id", "--RemoteProcessProxy.kernel-id",
//  either with "=value"): its index, and *inline_p the value after '='.
static int
s_match (const char *arg, const char **inline_p)
{
    static const char old [] = "--RemoteProcessProxy.";
    *inline_p = NULL;
    for (size_t i = 0; i < S_NOPTS; i++) {
        const char *rest = NULL;
        if (strncmp (arg, "--", 2) == 0 && strncmp (arg + 2, s_opts [i].name,
                                                    strlen (s_opts [i].name)) == 0)
            rest = arg + 2 + strlen (s_opts [i].name);
        else if (s_opts [i].old && strncmp (arg, old, sizeof old - 1) == 0
             &&  strncmp (arg + sizeof old - 1, s_opts [i].name, strlen (s_opts [i].name)) == 0)
            rest = arg + sizeof old - 1 + strlen (s_opts [i].name);
        if (rest && (*rest == '\0' || *rest == '=')) {
            *inline_p = *rest == '=' ? rest + 1 : NULL;
            return (int) i;
        }
    }
    return -1;
}

//  Flags into val (by slot) and the rest into self->pass.
static int
s_scan (gw_rargs_t *self, int argc, char **argv, const char **val, char *err, size_t errlen)
{
    self->pass = calloc ((size_t) argc + 1, sizeof *self->pass);
    if (!self->pass)
        abort ();
    for (int i = 1; i < argc; i++) {
        const char *value = NULL;
        int o = strcmp (argv [i], "--") == 0 ? -2 : s_match (argv [i], &value);
        if (o == -2) {
            while (++i < argc)
                self->pass [self->npass++] = argv [i];
            break;
        }
        if (o < 0) {
            self->pass [self->npass++] = argv [i];
            continue;
        }
        if (!value && (i + 1 >= argc || strcmp (argv [i + 1], "--") == 0)) {
            snprintf (err, errlen, "%.100s wants a value", argv [i]);
            return -EINVAL;
        }
        if (!value)
            value = argv [++i];
        if (s_opts [o].slot != S_IGNORED)
            val [s_opts [o].slot] = value;
    }
    return 0;
}

static bool
s_safe_id (const char *id)
{
    size_t n = strlen (id);
    if (n == 0 || n > GW_RARGS_ID_MAX || id [0] == '.' || id [0] == '-')
        return false;
    return strspn (id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

//  A decimal integer lo..hi filling all of text, or -1.
static long
s_number (const char *text, size_t n, long lo, long hi)
{
    if (n == 0 || n > 6 || strspn (text, "0123456789") < n)
        return -1;
    char buf [8];
    memcpy (buf, text, n);
    buf [n] = 0;
    long v = strtol (buf, NULL, 10);
    return v >= lo && v <= hi ? v : -1;
}

//  "host:port" into self, or -EINVAL with err.
static int
s_response (gw_rargs_t *self, const char *text, char *err, size_t errlen)
{
    const char *colon = strrchr (text, ':');
    size_t hn = colon ? (size_t) (colon - text) : 0;
    long port = colon ? s_number (colon + 1, strlen (colon + 1), 1, 65535) : -1;
    bool host_ok = hn > 0 && hn < sizeof self->response_host
                && strspn (text, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                 "0123456789.-") == hn && text [0] != '-';
    if (!host_ok || port < 0) {
        snprintf (err, errlen, "response address '%.100s' is not HOST:PORT (an IPv4 address "
                  "or host name, and a port 1..65535)", text);
        return -EINVAL;
    }
    memcpy (self->response_host, text, hn);
    self->response_host [hn] = 0;
    self->response_port = (int) port;
    return 0;
}

//  "LO..HI" into self, or -EINVAL with err.
static int
s_range (gw_rargs_t *self, const char *text, char *err, size_t errlen)
{
    const char *dots = strstr (text, "..");
    long lo = dots ? s_number (text, (size_t) (dots - text), 0, 65535) : -1;
    long hi = dots ? s_number (dots + 2, strlen (dots + 2), 0, 65535) : -1;
    if (lo < 0 || hi < 0 || (lo == 0) != (hi == 0) || hi < lo) {
        snprintf (err, errlen, "port range '%.100s' is not LO..HI (1 <= LO <= HI <= 65535, or "
                  "0..0 for any port)", text);
        return -EINVAL;
    }
    if (hi && hi - lo + 1 < GW_RARGS_PORTS) {
        snprintf (err, errlen, "port range '%.100s' is too narrow: it must hold at least %d "
                  "ports (five for Jupyter, one for the comm port)", text, GW_RARGS_PORTS);
        return -EINVAL;
    }
    self->port_lo = (int) lo;
    self->port_hi = (int) hi;
    return 0;
}

//  The bind address and the launch timeout.
static int
s_ip_timeout (gw_rargs_t *self, const char *ip, const char *timeout, char *err, size_t errlen)
{
    struct in_addr a;
    if (!ip || !*ip)
        ip = "0.0.0.0";
    if (strlen (ip) >= sizeof self->ip || inet_pton (AF_INET, ip, &a) != 1) {
        snprintf (err, errlen, "listen address '%.100s' is not an IPv4 address", ip);
        return -EINVAL;
    }
    snprintf (self->ip, sizeof self->ip, "%s", ip);
    char *end = NULL;
    self->launch_timeout = timeout ? strtod (timeout, &end) : 30.0;
    if (timeout && (end == timeout || *end || !isfinite (self->launch_timeout)
                    || self->launch_timeout <= 0 || self->launch_timeout > 86400)) {
        snprintf (err, errlen, "launch timeout '%.100s' is not a number of seconds "
                  "(0 < S <= 86400)", timeout);
        return -EINVAL;
    }
    return 0;
}

//  The values, checked, into self.
static int
s_check (gw_rargs_t *self, const char **val, char *err, size_t errlen)
{
    if (!val [S_KID] || !val [S_KID][0]) {
        snprintf (err, errlen, "no kernel id: give --kernel-id ID (or KERNEL_ID)");
        return -EINVAL;
    }
    if (!s_safe_id (val [S_KID])) {
        snprintf (err, errlen, "kernel id '%.100s' is not a safe name (1 to %d of A-Z a-z 0-9 "
                  "_ . -, not starting with . or -)", val [S_KID], GW_RARGS_ID_MAX);
        return -EINVAL;
    }
    self->kernel_id = val [S_KID];
    if (!val [S_RESP] || !val [S_RESP][0]) {
        snprintf (err, errlen, "no response address: give --response-address HOST:PORT "
                  "(or RESPONSE_ADDRESS)");
        return -EINVAL;
    }
    if (!val [S_KEY] || !val [S_KEY][0]) {
        snprintf (err, errlen, "no public key: give --public-key KEY (or PUBLIC_KEY)");
        return -EINVAL;
    }
    self->public_key = val [S_KEY];
    int rc = s_response (self, val [S_RESP], err, errlen);
    if (rc == 0)
        rc = s_range (self, val [S_RANGE] && *val [S_RANGE] ? val [S_RANGE] : "0..0", err,
                      errlen);
    if (rc == 0)
        rc = s_ip_timeout (self, val [S_IP], val [S_TIMEOUT], err, errlen);
    const char *enc = val [S_ENC] && val [S_ENC][0] ? val [S_ENC] : "none";
    self->curve = strcmp (enc, "curve") == 0;
    if (rc == 0 && !self->curve && strcmp (enc, "none") != 0) {
        snprintf (err, errlen, "encryption '%.40s' is not known: use none or curve", enc);
        rc = -EINVAL;
    }
    return rc;
}

int
gw_rargs_parse (gw_rargs_t *self, int argc, char **argv, char *const *envp, char *err,
                size_t errlen)
{
    assert (self && argv && err);
    memset (self, 0, sizeof *self);
    const char *val [S_NSLOTS] = { 0 };
    int rc = s_scan (self, argc, argv, val, err, errlen);
    for (size_t i = 0; i < S_NOPTS && rc == 0; i++)
        if (s_opts [i].slot != S_IGNORED && !val [s_opts [i].slot])
            val [s_opts [i].slot] = s_env (envp, s_opts [i].env);
    if (rc == 0)
        rc = s_check (self, val, err, errlen);
    if (rc < 0)
        gw_rargs_release (self);
    return rc;
}

void
gw_rargs_release (gw_rargs_t *self)
{
    assert (self);
    free (self->pass);
    self->pass = NULL;
    self->npass = 0;
}
