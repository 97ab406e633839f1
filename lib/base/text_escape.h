/*
 * text_escape.h — makes text from files safe to show on a terminal. Error
 * and log messages quote file contents (tokenizer values, metadata keys,
 * tensor names, paths); a control character among them — an escape sequence
 * above all — would act on the terminal of whoever prints the message.
 */
#ifndef NCTMC_TEXT_ESCAPE_H
#define NCTMC_TEXT_ESCAPE_H

#include <stddef.h>

/*
 * Copies the string `in` into out (out_size > 0; always terminated),
 * writing "\xNN" for each byte that could control a terminal: C0 controls
 * (newline and tab included: a message is one line), DEL, the C1 controls
 * U+0080..U+009F in their UTF-8 form, and every byte that is not part of
 * valid UTF-8 (a lone 0x9B is CSI to an 8-bit terminal). Valid UTF-8 text
 * and backslashes are copied as they are, so escaping twice changes
 * nothing. An escape that does not fit is left out whole. Returns the
 * length written.
 */
size_t text_escape(char *out, size_t out_size, const char *in);

#endif /* NCTMC_TEXT_ESCAPE_H */
