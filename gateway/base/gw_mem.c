/*  gw_mem - copies that cannot fail (see gw_mem.h). */
#include "base/gw_mem.h"

#include <stdlib.h>
#include <string.h>

char *
gw_strdup (const char *text)
{
    return text ? gw_memdup (text, strlen (text) + 1) : NULL;
}

void *
gw_memdup (const void *data, size_t len)
{
    void *copy = malloc (len ? len : 1);
    if (!copy)
        abort ();
    if (len)
        memcpy (copy, data, len);
    return copy;
}
