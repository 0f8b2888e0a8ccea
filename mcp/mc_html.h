/*  mc_html - HTML a cell displayed, as plain text a model can read.

    Made for what notebooks show, pandas' DataFrame tables first: each table
    row becomes one line with its cells joined by " | "; <br>, <p>, <div>,
    <li> and headings break lines; <style> and <script> are dropped with
    their contents; other tags are removed; the common entities are decoded
    and runs of blank lines squeezed. Pure, and safe on any input.
*/
#ifndef MC_HTML_H
#define MC_HTML_H

#include <stdbool.h>
#include <stddef.h>

//  New NUL-terminated text for len bytes of html. The caller frees it.
char *mc_html_to_text (const char *html, size_t len);

//  True when html holds a <table (any case).
bool mc_html_has_table (const char *html, size_t len);

#endif
