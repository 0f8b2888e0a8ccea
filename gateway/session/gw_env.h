/*  gw_env - the environment a client means for the kernel.

    The gateway's own environment is the host's and never reaches a guest.
    What a client meant for the kernel it says explicitly, with a prefix:
    CELLVM_ENV_<NAME>=value (in start_kernel(env=...), or a kernelspec's
    "env") becomes NAME=value in the kernel's os.environ, on the first
    driver hello of each kernel process (docs/gateway.md "Environment").
    Pure: an envp array in, a JSON object out.
*/
#ifndef GW_ENV_H
#define GW_ENV_H
#include <jansson.h>
#include <stddef.h>

#define GW_ENV_PREFIX "CELLVM_ENV_"
#define GW_ENV_MAX_VARS 256
#define GW_ENV_MAX_BYTES (256u * 1024u)     //  names and values together

//  {NAME: value} from envp's CELLVM_ENV_ entries. A name that is not
//  [A-Za-z_][A-Za-z0-9_]* (at most 128), a value that is not UTF-8, or
//  anything past the caps is left out; *skipped_p (may be NULL) counts
//  those, so the caller can say so once.
json_t *gw_env_passed (char *const *envp, size_t *skipped_p);

#endif
