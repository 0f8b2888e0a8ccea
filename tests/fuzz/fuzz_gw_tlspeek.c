/*  fuzz_gw_tlspeek - the first bytes a guest's TLS client sends through the
    egress proxy, read for their server name. An answer must be one of the
    four; a name must be a lowercase DNS name; a need must lie past the
    bytes given; a refusal must say why; and the answer for a whole hello
    must not change with bytes appended after it.
*/
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/gw_egress.h"
#include "net/gw_tlspeek.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    char name [GW_EGRESS_NAME_MAX + 1], why [200], again [GW_EGRESS_NAME_MAX + 1];
    size_t need = 0;
    int rc = gw_tlspeek_sni (data, size, name, sizeof name, &need, why, sizeof why);
    if (rc == 0 && name [0] && (gw_egress_name (name, again, sizeof again) < 0
                            ||  strcmp (name, again) != 0))
        abort ();
    if (rc == -EAGAIN && need <= size)
        abort ();
    if (rc == -EPROTO && !why [0])
        abort ();
    if (rc != 0 && rc != -EAGAIN && rc != -EPROTO && rc != -E2BIG)
        abort ();
    if (rc == 0 && size < 4 * GW_TLSPEEK_MAX) {
        uint8_t *more = malloc (size + 7);
        if (!more)
            return 0;
        memcpy (more, data, size);
        memcpy (more + size, "\x17\x03\x03\x00\x02zz", 7);
        size_t need2 = 0;
        if (gw_tlspeek_sni (more, size + 7, again, sizeof again, &need2, why, sizeof why) != 0
        ||  strcmp (name, again) != 0)
            abort ();
        free (more);
    }
    return 0;
}
