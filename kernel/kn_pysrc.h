/*  kn_pysrc - embedded Python sources (NUL-terminated). */
#ifndef KN_PYSRC_H
#define KN_PYSRC_H

extern const char kn_pysrc_shell [];
extern const char kn_pysrc_comm [];
extern const char kn_pysrc_debug [];
extern const char kn_pysrc_fast [];
extern const char kn_pysrc_warm [];
extern const char kn_pysrc_io [];
extern const char kn_pysrc_plain [];
extern const char kn_pysrc_jedi [];

#endif
