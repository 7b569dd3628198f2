//! GPT-2's byte-level alphabet: every byte 0..=255 stands for one printable Unicode character,
//! so a vocabulary of strings can hold arbitrary bytes. Printable Latin-1 bytes (`!`..`~`,
//! `¡`..`¬`, `®`..`ÿ`) stand for themselves; the other 68 bytes (controls, space, DEL, NBSP,
//! soft hyphen) take the code points 256.. in byte order. This is the published mapping that
//! every byte-level `tokenizer.json` assumes (a space is `Ġ`, a newline `Ċ`).

/// Whether `b` is one of the bytes that stand for themselves.
const fn is_printable(b: u32) -> bool {
    (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
}

const fn build_byte_to_code() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut next = 256u32;
    let mut b = 0u32;
    while b < 256 {
        table[b as usize] = if is_printable(b) {
            b
        } else {
            next += 1;
            next - 1
        };
        b += 1;
    }
    table
}

/// The highest code point in the alphabet is 256 + 67.
const CODE_LIMIT: usize = 256 + 68;

const fn build_code_to_byte() -> [i16; CODE_LIMIT] {
    let forward = build_byte_to_code();
    let mut table = [-1i16; CODE_LIMIT];
    let mut b = 0;
    while b < 256 {
        table[forward[b] as usize] = b as i16;
        b += 1;
    }
    table
}

static BYTE_TO_CODE: [u32; 256] = build_byte_to_code();
static CODE_TO_BYTE: [i16; CODE_LIMIT] = build_code_to_byte();

/// The character that stands for byte `b`.
pub fn byte_to_char(b: u8) -> char {
    // Every table entry is below 0x144, a valid scalar value.
    char::from_u32(BYTE_TO_CODE[b as usize]).unwrap_or('\u{FFFD}')
}

/// The byte a character stands for, or `None` for a character outside the alphabet.
pub fn char_to_byte(c: char) -> Option<u8> {
    let code = c as usize;
    if code < CODE_LIMIT && CODE_TO_BYTE[code] >= 0 {
        Some(CODE_TO_BYTE[code] as u8)
    } else {
        None
    }
}

/// `bytes` written in the alphabet (`" hi"` becomes `"Ġhi"`).
pub fn encode_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| byte_to_char(b)).collect()
}

/// The bytes a string in the alphabet stands for; `None` if a character is outside it.
pub fn decode_chars(s: &str) -> Option<Vec<u8>> {
    s.chars().map(char_to_byte).collect()
}

/// The 256 alphabet characters in code point order, the order Hugging Face's trainer gives
/// them ids in.
pub fn alphabet_in_code_point_order() -> Vec<char> {
    let mut chars: Vec<char> = (0..=255u8).map(byte_to_char).collect();
    chars.sort_unstable();
    chars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_a_bijection_over_all_256_bytes() {
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = byte_to_char(b);
            assert!(seen.insert(c), "byte {b} maps to {c:?}, already taken");
            assert_eq!(char_to_byte(c), Some(b));
        }
        assert_eq!(seen.len(), 256);
    }

    #[test]
    fn byte_map_matches_gpt2_for_space_newline_and_letters() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(byte_to_char(0xAD), 'Ń');
        assert_eq!(byte_to_char(0), 'Ā');
    }

    #[test]
    fn characters_outside_the_alphabet_have_no_byte() {
        assert_eq!(char_to_byte(' '), None);
        assert_eq!(char_to_byte('中'), None);
        assert_eq!(decode_chars("aĠ中"), None);
    }

    #[test]
    fn alphabet_order_starts_with_printable_ascii() {
        let a = alphabet_in_code_point_order();
        assert_eq!(a.len(), 256);
        assert_eq!(a[0], '!');
        assert_eq!(a[93], '~');
        assert_eq!(a[255], byte_to_char(0xAD));
    }
}
