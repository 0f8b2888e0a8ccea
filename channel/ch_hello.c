/*  ch_hello - the first message on each port. */
#include "ch_hello.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

json_t *
ch_hello_driver (const char *protocol, const char *implementation, int with_time)
{
    assert (protocol && implementation);
    json_t *c = json_pack ("{s:s, s:i, s:s, s:s}", "protocol", protocol,
                           "version", CH_HELLO_VERSION, "role", "driver",
                           "implementation", implementation);
    if (!c)
        abort ();
    if (with_time) {
        json_object_set_new (c, "time", json_real (ch_clock_wall_s ()));
    }
    return c;
}

int
ch_hello_check (const json_t *content, const char *protocol, const char *role,
                char *why, size_t whylen)
{
    assert (protocol && why);
    const char *p = json_string_value (json_object_get (content, "protocol"));
    json_t *version = json_object_get (content, "version");
    const char *r = json_string_value (json_object_get (content, "role"));
    if (!p || strcmp (p, protocol) != 0)
        snprintf (why, whylen, "hello names another protocol than %s", protocol);
    else if (!json_is_integer (version) || json_integer_value (version) != CH_HELLO_VERSION)
        snprintf (why, whylen, "hello has a %s version other than %d", protocol,
                  CH_HELLO_VERSION);
    else if (role && (!r || strcmp (r, role) != 0))
        snprintf (why, whylen, "hello does not come from a %s", role);
    else
        return 0;
    return -EPROTO;
}
