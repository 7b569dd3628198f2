//! `truncation` and `padding` of a `tokenizer.json` (sentence-transformers files set both:
//! all-MiniLM-L6-v2 truncates to 128 and pads to 128). They apply where Hugging Face's
//! default `encode(text)` applies them, to `Tokenizer::encode_with_template`: the text's ids
//! are cut so that they and the template's tokens fit `max_length`, then the whole is padded.
//! Plain `encode` (a corpus encoder) never cuts or pads.

use crate::{Error, Result};
use serde_json::Value;

/// Which end is cut or padded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Left,
    Right,
}

impl Side {
    fn parse(v: Option<&Value>, field: &str) -> Result<Side> {
        match v.and_then(Value::as_str) {
            None | Some("Right") => Ok(Side::Right),
            Some("Left") => Ok(Side::Left),
            Some(other) => Err(bad(
                field,
                format!("direction {other:?} is not Left or Right"),
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    pub max_length: usize,
    pub direction: Side,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Padding {
    /// `Fixed(n)`: pad to n; `None` (`BatchLongest`): a single text is its own longest.
    pub fixed: Option<usize>,
    pub multiple_of: Option<usize>,
    pub direction: Side,
    pub pad_id: u32,
}

/// Both settings, with the objects as read (written back unchanged).
#[derive(Clone, Debug, Default)]
pub struct Limits {
    pub truncation: Option<Truncation>,
    pub padding: Option<Padding>,
    pub truncation_json: Value,
    pub padding_json: Value,
}

fn bad(field: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid("tokenizer", format!("{field}: {msg}"))
}

fn count(v: &Value, field: &str, key: &str) -> Result<Option<usize>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| bad(&format!("{field}.{key}"), "expected a count")),
    }
}

impl Limits {
    /// Reads the two top-level objects (either may be null).
    pub fn read(truncation: Option<&Value>, padding: Option<&Value>) -> Result<Limits> {
        let null = Value::Null;
        let (t, p) = (truncation.unwrap_or(&null), padding.unwrap_or(&null));
        let truncation = match t {
            Value::Null => None,
            v => {
                let strategy = v
                    .get("strategy")
                    .and_then(Value::as_str)
                    .unwrap_or("LongestFirst");
                if !matches!(strategy, "LongestFirst" | "OnlyFirst") {
                    return Err(bad(
                        "truncation.strategy",
                        format!(
                            "{strategy:?} cuts a second sequence, which single texts do not have"
                        ),
                    ));
                }
                let max_length = count(v, "truncation", "max_length")?
                    .ok_or_else(|| bad("truncation.max_length", "is missing"))?;
                Some(Truncation {
                    max_length,
                    direction: Side::parse(v.get("direction"), "truncation")?,
                })
            }
        };
        let padding = match p {
            Value::Null => None,
            v => {
                let fixed = match v.get("strategy") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) if s == "BatchLongest" => None,
                    Some(s) => match s.get("Fixed").and_then(Value::as_u64) {
                        Some(n) => Some(n as usize),
                        None => {
                            return Err(bad(
                                "padding.strategy",
                                format!("{s} is not \"BatchLongest\" or {{\"Fixed\": n}}"),
                            ))
                        }
                    },
                };
                let pad_id = count(v, "padding", "pad_id")?.unwrap_or(0);
                Some(Padding {
                    fixed,
                    multiple_of: count(v, "padding", "pad_to_multiple_of")?.filter(|&m| m > 0),
                    direction: Side::parse(v.get("direction"), "padding")?,
                    pad_id: u32::try_from(pad_id)
                        .map_err(|_| bad("padding.pad_id", "is too large"))?,
                })
            }
        };
        Ok(Limits {
            truncation,
            padding,
            truncation_json: t.clone(),
            padding_json: p.clone(),
        })
    }

    /// `ids` cut so that they and `around` template tokens fit, as Hugging Face truncates a
    /// single sequence.
    pub fn truncate(&self, mut ids: Vec<u32>, around: usize) -> Result<Vec<u32>> {
        let Some(t) = &self.truncation else {
            return Ok(ids);
        };
        if ids.len() + around <= t.max_length {
            return Ok(ids);
        }
        let keep = t.max_length.checked_sub(around).ok_or_else(|| {
            bad(
                "truncation.max_length",
                format!(
                    "{} is shorter than the template's {around} tokens",
                    t.max_length
                ),
            )
        })?;
        match t.direction {
            Side::Right => ids.truncate(keep),
            Side::Left => {
                ids.drain(..ids.len() - keep);
            }
        }
        Ok(ids)
    }

    /// `ids` padded to the fixed length (or their own), rounded up to the multiple.
    pub fn pad(&self, mut ids: Vec<u32>) -> Vec<u32> {
        let Some(p) = &self.padding else {
            return ids;
        };
        let mut target = p.fixed.unwrap_or(ids.len());
        if let Some(m) = p.multiple_of {
            target = target.div_ceil(m) * m;
        }
        if ids.len() >= target {
            return ids;
        }
        let pads = std::iter::repeat_n(p.pad_id, target - ids.len());
        match p.direction {
            Side::Right => ids.extend(pads),
            Side::Left => {
                ids.splice(0..0, pads);
            }
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits(t: Value, p: Value) -> Limits {
        Limits::read(Some(&t), Some(&p)).unwrap()
    }

    #[test]
    fn truncation_leaves_room_for_the_template_from_either_side() {
        let right = limits(
            json!({"max_length": 5, "strategy": "LongestFirst", "direction": "Right", "stride": 0}),
            Value::Null,
        );
        assert_eq!(right.truncate(vec![1, 2, 3, 4, 5], 2).unwrap(), [1, 2, 3]);
        assert_eq!(right.truncate(vec![1, 2], 2).unwrap(), [1, 2]);
        let left = limits(json!({"max_length": 5, "direction": "Left"}), Value::Null);
        assert_eq!(left.truncate(vec![1, 2, 3, 4, 5], 2).unwrap(), [3, 4, 5]);
        assert!(right.truncate(vec![1; 9], 6).is_err());
    }

    #[test]
    fn padding_fills_to_the_fixed_length_or_the_multiple() {
        let fixed = limits(
            Value::Null,
            json!({"strategy": {"Fixed": 5}, "direction": "Right", "pad_id": 9}),
        );
        assert_eq!(fixed.pad(vec![1, 2]), [1, 2, 9, 9, 9]);
        assert_eq!(fixed.pad(vec![1; 7]), [1; 7]);
        let multiple = limits(
            Value::Null,
            json!({"strategy": "BatchLongest", "direction": "Left", "pad_id": 0, "pad_to_multiple_of": 4}),
        );
        assert_eq!(multiple.pad(vec![1, 2, 3, 4, 5]), [0, 0, 0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_strategy_for_pairs_is_refused() {
        let err = Limits::read(
            Some(&json!({"max_length": 5, "strategy": "OnlySecond"})),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("OnlySecond"), "{err}");
    }
}
