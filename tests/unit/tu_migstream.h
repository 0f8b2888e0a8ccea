/*  tu_migstream - the snapshot tests' share of the test helpers
    (test_gw_migsplit.c, test_gw_snapram.c): QEMU 7.2 migration streams
    built byte by byte, so that what a test expects is never made by the
    codec it tests.

    A stream here is the header, RAM's START with its block list, RAM's
    page records in PART sections and the last group in END, then what
    QEMU writes after RAM (a device section, QEMU_VM_EOF, a vmdescription).
    A test builds the whole of one with tu_migstream_stream, or its own
    odd one from the pieces. Each call that grows a buffer fails the test
    (cmocka) when memory runs out.
*/
#ifndef TU_MIGSTREAM_H_INCLUDED
#define TU_MIGSTREAM_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "snap/gw_migsplit.h"

#define TU_MIGSTREAM_PAGE GW_MIGSPLIT_PAGE
#define TU_MIGSTREAM_RAM_ID 2u                  //  the RAM section's id

//  The section types (QEMU_VM_SECTION_*) of an iterative section like RAM.
#define TU_MIGSTREAM_START 0x01u
#define TU_MIGSTREAM_PART 0x02u
#define TU_MIGSTREAM_END 0x03u

//  The flags of a RAM record's word, as QEMU's ram.c names them.
#define TU_MIGSTREAM_F_ZERO 0x02u
#define TU_MIGSTREAM_F_MEM_SIZE 0x04u
#define TU_MIGSTREAM_F_PAGE 0x08u
#define TU_MIGSTREAM_F_EOS 0x10u
#define TU_MIGSTREAM_F_CONT 0x20u

typedef struct {
    uint8_t *data;
    size_t len, cap;
} tu_migstream_buf_t;

//  A block of RAM's list: its idstr and its length in bytes.
typedef struct {
    const char *name;
    uint64_t bytes;
} tu_migstream_block_t;

//  A page record: page (an index into its block), the idstr unless it
//  continues the block of the record before, then the page (tag) or the
//  fill byte of a zero page (fill: 0 as QEMU writes it). block NULL marks
//  where a section ends and the next begins.
typedef struct {
    const char *block;
    uint64_t page;
    bool zero, cont;
    uint32_t tag;
    uint8_t fill;
} tu_migstream_rec_t;

//  Bytes onto the end of b; the numbers big-endian, as QEMU writes them.
void tu_migstream_put (tu_migstream_buf_t *b, const void *data, size_t len);
void tu_migstream_u8 (tu_migstream_buf_t *b, uint8_t v);
void tu_migstream_be32 (tu_migstream_buf_t *b, uint32_t v);
void tu_migstream_be64 (tu_migstream_buf_t *b, uint64_t v);

//  A length byte and the name, as QEMU writes idstrs and section names.
void tu_migstream_name (tu_migstream_buf_t *b, const char *name);

//  b's bytes freed, b empty again.
void tu_migstream_free (tu_migstream_buf_t *b);

//  Magic, version 3 and the configuration naming the machine.
void tu_migstream_header (tu_migstream_buf_t *b);

//  A section's opening: its type, then its id (START adds more: ram_start).
void tu_migstream_section (tu_migstream_buf_t *b, uint8_t type, uint32_t id);

//  A section's end: the records' EOS, then the footer with section id.
void tu_migstream_eos_footer (tu_migstream_buf_t *b, uint32_t id);

//  RAM's START: its header, MEM_SIZE (total, as said: a test may lie)
//  and the n blocks of the list, then its end.
void tu_migstream_ram_start (tu_migstream_buf_t *b, uint64_t total,
                             const tu_migstream_block_t *blocks, size_t n);

//  The bytes of a page with this tag: no two tags give the same page, and
//  none is all zeros.
void tu_migstream_page_data (uint8_t *page, uint32_t tag);

//  The record r.
void tu_migstream_record (tu_migstream_buf_t *b, const tu_migstream_rec_t *r);

//  After RAM's END, what QEMU writes next: a device section whose bytes
//  look like a RAM PART with a page of "mem" (verbatim, never parsed),
//  QEMU_VM_EOF and a vmdescription.
void tu_migstream_tail (tu_migstream_buf_t *b);

//  A whole stream: START with the n blocks (MEM_SIZE their sum), the
//  records in PART sections (each NULL block starts the next), the last
//  group in END, then the tail. Records of block drop (unless NULL) are
//  left out, as a split for drop must leave them out.
void tu_migstream_stream (tu_migstream_buf_t *b, const tu_migstream_block_t *blocks, size_t nblocks,
                          const tu_migstream_rec_t *recs, size_t n, const char *drop);

#endif
