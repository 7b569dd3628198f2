//! Progress messages show floats with 4 significant digits (`loss 2.303`, not
//! `loss 2.3025850929940455`): a script writes `progress_message(`loss ${loss}`)` and Rhai
//! interpolates every digit of the f64.

/// `x` with 4 significant digits (`sig(x, 4)`).
pub fn sig4(x: f64) -> String {
    sig(x, 4)
}

/// `x` with `digits` significant digits (at least 1), as C's and Python's `%.{digits}g`: fixed
/// notation for exponents from -4 to digits - 1, scientific otherwise, trailing zeros dropped.
pub fn sig(x: f64, digits: usize) -> String {
    if !x.is_finite() || x == 0.0 {
        return x.to_string();
    }
    let digits = digits.clamp(1, 17);
    // `{:.Ne}` rounds to N + 1 significant digits and says where the point went.
    let sci = format!("{x:.*e}", digits - 1);
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return sci;
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..digits as i32).contains(&exp) {
        trim_zeros(format!("{x:.*}", (digits as i32 - 1 - exp) as usize))
    } else {
        format!("{}e{exp}", trim_zeros(mantissa.to_string()))
    }
}

fn trim_zeros(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Rewrites every decimal number of more than 4 significant digits in `text` with 4.
/// Integers (step counts, sizes) and dotted words (`v1.2.3`) are left alone.
pub fn shorten(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let starts_number = bytes[i].is_ascii_digit()
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'.'));
        if !starts_number {
            i += 1;
            continue;
        }
        let end = number_end(bytes, i);
        let token = &text[i..end];
        let dotted_word = match bytes.get(end) {
            Some(b'.') => bytes.get(end + 1).is_some_and(u8::is_ascii_alphanumeric),
            Some(b) => b.is_ascii_alphabetic(),
            None => false,
        };
        if token.contains('.') && !dotted_word && significant_digits(token) > 4 {
            if let Ok(x) = token.parse::<f64>() {
                out.push_str(&text[copied..i]);
                out.push_str(&sig4(x));
                copied = end;
            }
        }
        i = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// The end of `digits[.digits][e[+-]digits]` starting at `start`.
fn number_end(bytes: &[u8], start: usize) -> usize {
    let digits = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let mut end = digits(start);
    if bytes.get(end) == Some(&b'.') && bytes.get(end + 1).is_some_and(u8::is_ascii_digit) {
        end = digits(end + 1);
    }
    if matches!(bytes.get(end), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(end + 1), Some(b'+' | b'-')));
        if bytes.get(end + 1 + sign).is_some_and(u8::is_ascii_digit) {
            end = digits(end + 1 + sign);
        }
    }
    end
}

/// Digits of the mantissa without leading zeros: `0.001234` has 4.
fn significant_digits(token: &str) -> usize {
    let mantissa = token.split(['e', 'E']).next().unwrap_or(token);
    mantissa
        .chars()
        .filter(char::is_ascii_digit)
        .skip_while(|&c| c == '0')
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_keep_four_significant_digits() {
        let cases = [
            (2.304123456789, "2.304"),
            (0.123456789, "0.1235"),
            (12345.678, "1.235e4"),
            (1234.5678, "1235"),
            (0.000123456, "0.0001235"),
            (0.0000123456, "1.235e-5"),
            (9.99996, "10"),
            (0.5, "0.5"),
            (-1.23456, "-1.235"),
        ];
        for (x, text) in cases {
            assert_eq!(sig4(x), text, "{x}");
        }
    }

    #[test]
    fn other_digit_counts_round_like_percent_g() {
        let cases = [
            (3.353421449661255, 2, "3.4"),
            (3.353421449661255, 6, "3.35342"),
            (123456.0, 3, "1.23e5"),
            (123456.0, 6, "123456"),
            (0.00012345, 1, "0.0001"),
            (7.0, 0, "7"),
        ];
        for (x, digits, text) in cases {
            assert_eq!(sig(x, digits), text, "{x} to {digits}");
        }
    }

    #[test]
    fn long_decimals_in_a_message_are_shortened_and_the_rest_kept() {
        assert_eq!(
            shorten("loss 2.302585092994046 val 0.5 step 1200 lr 3e-4"),
            "loss 2.303 val 0.5 step 1200 lr 3e-4"
        );
        assert_eq!(
            shorten("#{\"acc\": 0.9733333333333334, \"loss\": -1.0000000000000002e-7}"),
            "#{\"acc\": 0.9733, \"loss\": -1e-7}"
        );
        assert_eq!(shorten("v1.2.34567 at 10.123456."), "v1.2.34567 at 10.12.");
    }
}
