/*  gw_rargs - cellvm-remote's inputs: what Enterprise Gateway or Gateway
    Provisioners put in the kernelspec's argv or, in a kernel pod, in the
    environment. Flags win over the environment.

        --kernel-id ID            --RemoteProcessProxy.kernel-id ID          KERNEL_ID
        --response-address H:P    --RemoteProcessProxy.response-address H:P  RESPONSE_ADDRESS
        --public-key B64          --RemoteProcessProxy.public-key B64        PUBLIC_KEY
        --port-range LO..HI       --RemoteProcessProxy.port-range LO..HI     PORT_RANGE
        --ip ADDR (where the ports listen, default 0.0.0.0)                  CELLVM_REMOTE_IP
        --launch-timeout S (default 30)                                      KERNEL_LAUNCH_TIMEOUT
        --encryption none|curve (CurveZMQ on the five ports: a keypair of    CELLVM_REMOTE_ENCRYPTION
          its own in the connection file and the reply, docs/security.md)

    Each also as --name=value. The other options of EG's and GP's own
    launchers (--spark-context-initialization-mode, --cluster-type,
    --kernel-class-name, with or without RemoteProcessProxy.) are accepted
    with their value and ignored. Everything after "--", and any other
    argument, is passed to cellvm-gateway. Pure: no I/O, the environment
    is an argument.
*/
#ifndef GW_RARGS_H
#define GW_RARGS_H

#include <stdbool.h>
#include <stddef.h>

#define GW_RARGS_PORTS 6                        //  five Jupyter ports and the comm port
#define GW_RARGS_ID_MAX 128

typedef struct {
    const char *kernel_id;                      //  safe as a file name: [A-Za-z0-9_.-]
    char response_host [256];                   //  IPv4 literal or host name
    int response_port;
    const char *public_key;                     //  as given (gw_egreply checks it)
    int port_lo, port_hi;                       //  0, 0: any port
    char ip [16];                               //  IPv4 literal the ports listen on
    double launch_timeout;                      //  seconds to deliver the reply
    bool curve;                                 //  --encryption curve
    const char **pass;                          //  for cellvm-gateway (NULL-terminated)
    int npass;
} gw_rargs_t;

//  Parse argv (argv[0] skipped) over envp (NAME=value, NULL-terminated; may
//  be NULL). Strings are borrowed from argv and envp. 0, or -EINVAL with a
//  one-line reason naming the input in err (and nothing to release).
int gw_rargs_parse (gw_rargs_t *self, int argc, char **argv, char *const *envp, char *err,
                    size_t errlen);

//  Release what parse allocated (the pass list). NULL-safe, idempotent.
void gw_rargs_release (gw_rargs_t *self);

#endif
