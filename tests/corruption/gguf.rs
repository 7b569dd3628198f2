//! GGUF's well-framed corruption: the file is walked as the format lays it out, every field
//! that holds a size, a count, a type code, an offset or a number the model is sized by is
//! listed, and one of them is set to a hostile value in place. The framing around it stays
//! right, so the value reaches the code that trusts it (a string length, an array count, a
//! tensor dim, `llama.embedding_length`, `llama.rope.freq_base`).

use super::rng::Rng;

#[derive(Clone, Copy)]
enum Width {
    U32,
    U64,
    F32,
}

struct Field {
    at: usize,
    width: Width,
    name: String,
}

struct Walk<'a> {
    b: &'a [u8],
    at: usize,
    fields: Vec<Field>,
}

impl Walk<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn field(&mut self, width: Width, name: &str) -> Option<u64> {
        let at = self.at;
        let v = match width {
            Width::U32 | Width::F32 => u32::from_le_bytes(self.take(4)?.try_into().ok()?) as u64,
            Width::U64 => u64::from_le_bytes(self.take(8)?.try_into().ok()?),
        };
        self.fields.push(Field {
            at,
            width,
            name: name.to_string(),
        });
        Some(v)
    }

    fn string(&mut self, name: &str) -> Option<String> {
        let n = self.field(Width::U64, &format!("{name} length"))?;
        let s = self.take(usize::try_from(n).ok()?)?;
        Some(String::from_utf8_lossy(s).into_owned())
    }

    /// A value of type `ty`; scalars that hold sizes or rotary and norm constants are fields.
    fn value(&mut self, ty: u64, key: &str) -> Option<()> {
        match ty {
            0 | 1 | 7 => drop(self.take(1)?),
            2 | 3 => drop(self.take(2)?),
            4 | 5 => drop(self.field(Width::U32, key)?),
            6 => drop(self.field(Width::F32, key)?),
            8 => drop(self.string(key)?),
            10..=12 => drop(self.field(Width::U64, key)?),
            9 => {
                let elem = self.field(Width::U32, &format!("{key} element type"))?;
                let n = self.field(Width::U64, &format!("{key} count"))?;
                // The first few elements' fields are listed; the rest are only walked.
                for i in 0..n.min(1 << 20) {
                    let before = self.fields.len();
                    self.value(elem, key)?;
                    if i >= 4 {
                        self.fields.truncate(before);
                    }
                }
            }
            _ => return None,
        }
        Some(())
    }
}

fn fields(b: &[u8]) -> Option<Vec<Field>> {
    let mut w = Walk {
        b,
        at: 4,
        fields: Vec::new(),
    };
    w.field(Width::U32, "version")?;
    let tensors = w.field(Width::U64, "tensor count")?;
    let kvs = w.field(Width::U64, "metadata count")?;
    for _ in 0..kvs {
        let key = w.string("key")?;
        let ty = w.field(Width::U32, &format!("{key} value type"))?;
        w.value(ty, &key)?;
    }
    for _ in 0..tensors {
        let name = w.string("tensor name")?;
        let rank = w.field(Width::U32, &format!("{name} rank"))?;
        for d in 0..rank {
            w.field(Width::U64, &format!("{name} dim {d}"))?;
        }
        w.field(Width::U32, &format!("{name} type"))?;
        w.field(Width::U64, &format!("{name} offset"))?;
    }
    Some(w.fields)
}

const WORDS: &[u64] = &[
    0,
    1,
    2,
    3,
    31,
    1 << 16,
    1 << 31,
    u32::MAX as u64,
    1 << 40,
    u64::MAX,
];
const FLOATS: &[f32] = &[0.0, -1.0, f32::NAN, f32::INFINITY, f32::MIN_POSITIVE, 1e38];

/// One listed field of a GGUF file set to a hostile value.
pub fn gguf_field(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    let list = fields(valid)?;
    let f = rng.pick(&list);
    let mut out = valid.to_vec();
    let what = match f.width {
        Width::U32 => {
            let v = *rng.pick(WORDS) as u32;
            out[f.at..f.at + 4].copy_from_slice(&v.to_le_bytes());
            format!("{} (u32 at {}) set to {v}", f.name, f.at)
        }
        Width::U64 => {
            let v = *rng.pick(WORDS);
            out[f.at..f.at + 8].copy_from_slice(&v.to_le_bytes());
            format!("{} (u64 at {}) set to {v}", f.name, f.at)
        }
        Width::F32 => {
            let v = *rng.pick(FLOATS);
            out[f.at..f.at + 4].copy_from_slice(&v.to_le_bytes());
            format!("{} (f32 at {}) set to {v}", f.name, f.at)
        }
    };
    Some((out, what))
}
