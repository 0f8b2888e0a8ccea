/*  kn_pysrc - the Python half of the kernel, embedded in the binary so the
 *  guest needs one file. The Makefile rebuilds this when kernel/py changes.
 */
#include "kn_pysrc.h"

__asm__ (
    ".section .rodata\n"
    ".global kn_pysrc_shell\n"
    ".type kn_pysrc_shell, @object\n"
    "kn_pysrc_shell:\n"
    ".incbin \"kernel/py/cellvm_shell.py\"\n"
    ".byte 0\n"
    ".global kn_pysrc_comm\n"
    ".type kn_pysrc_comm, @object\n"
    "kn_pysrc_comm:\n"
    ".incbin \"kernel/py/cellvm_comm.py\"\n"
    ".byte 0\n"
    ".global kn_pysrc_debug\n"
    ".type kn_pysrc_debug, @object\n"
    "kn_pysrc_debug:\n"
    ".incbin \"kernel/py/cellvm_debug.py\"\n"
    ".byte 0\n"
    ".global kn_pysrc_fast\n"
    ".type kn_pysrc_fast, @object\n"
    "kn_pysrc_fast:\n"
    ".incbin \"kernel/py/cellvm_fast.py\"\n"
    ".byte 0\n"
    ".global kn_pysrc_warm\n"
    ".type kn_pysrc_warm, @object\n"
    "kn_pysrc_warm:\n"
    ".incbin \"kernel/py/cellvm_warm.py\"\n"
    ".byte 0\n"
    ".previous\n"
);
