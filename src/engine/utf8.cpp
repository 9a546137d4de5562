// UTF-8 completeness check for streamed output (RFC 3629 lead-byte lengths).
#include "engine/utf8.h"

namespace onebit {

size_t utf8_complete_prefix(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the lead byte of the last sequence.
  size_t i = s.size();
  size_t n_cont = 0;
  while (i > 0 && n_cont < 3 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++n_cont;
  }
  if (i == 0) return s.size();  // only continuation bytes: invalid, let them through
  const auto lead = static_cast<unsigned char>(s[i - 1]);
  const size_t need = (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : (lead & 0xF8) == 0xF0 ? 4 : 1;
  if (need == 1) return s.size();          // ASCII or an invalid lead: complete as far as we can tell
  return n_cont + 1 >= need ? s.size() : i - 1;  // hold the incomplete sequence back
}

}  // namespace onebit
