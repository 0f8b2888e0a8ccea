/*  mc_spec - a kernelspec: the kernel.json a gateway is started from.

    A kernelspec is looked up as jupyter_client does: kernels/NAME/kernel.json
    under each directory of $JUPYTER_PATH, then the user's and the system's
    Jupyter data directories, then share/jupyter beside this binary (the
    build tree, or PREFIX after make install).
*/
#ifndef MC_SPEC_H
#define MC_SPEC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct _mc_spec_t mc_spec_t;

//  Load kernelspec name (or, when name holds a '/', the kernel.json at that
//  path). NULL with err in words (where it looked).
mc_spec_t *mc_spec_load (const char *name, char *err, size_t errlen);
void mc_spec_destroy (mc_spec_t **self_p);

//  Where the kernel.json was found (borrowed).
const char *mc_spec_path (const mc_spec_t *self);

//  Its argv (an array of strings, at least one) and env (an object, or
//  NULL), borrowed: what mc_proc_spawn starts.
json_t *mc_spec_argv (const mc_spec_t *self);
json_t *mc_spec_env (const mc_spec_t *self);

//  True when the spec runs the unsafe-local backend (metadata.cellvm_backend,
//  or "--backend unsafe-local" in its argv): no isolation at all.
bool mc_spec_unsafe (const mc_spec_t *self);

//  The value a lifetime option of the gateway (option: "--idle-timeout" or
//  "--ttl") has for a gateway started from spec: ours when >= 0, appended
//  after the spec's argv (the gateway takes the last); else the spec's own
//  ("--ttl S" or "--ttl=S" in its argv, the last one); else fallback,
//  appended when > 0. 0 is no limit. *append_p: whether to append it.
double mc_spec_lifetime (const mc_spec_t *spec, const char *option, double ours,
                         double fallback, bool *append_p);

#endif
