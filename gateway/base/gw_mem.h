/*  gw_mem - copies that cannot fail: out of memory is not recoverable in
    the gateway (czmq's rule too), so these abort instead of returning NULL.
*/
#ifndef GW_MEM_H
#define GW_MEM_H

#include <stddef.h>

//  A malloc'ed copy of text; NULL stays NULL.
char *gw_strdup (const char *text);

//  A malloc'ed copy of data[0..len) (len 0: a 1-byte block, never NULL).
void *gw_memdup (const void *data, size_t len);

#endif
