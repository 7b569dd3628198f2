//! Rotary position embeddings in Hugging Face LLaMA's rotate-half layout: a head vector's first
//! half pairs with its second half (x_i with x_{i + d/2}), both rotated by angle
//! position * theta^(-2i/d). Checkpoints trained either way therefore agree on which weights
//! mean what.

use super::rope_scaling::{base_frequencies, Beyond, RopeScaling};
use crate::{Device, Result, Tensor};
use std::sync::Mutex;

/// The cos and sin tables [rows, head_dim]. They cover the positions used so far (rounded up
/// to a power of two, at most `max_seq_len`), not `max_seq_len` itself, which a config may set
/// to millions; they are made on first use per device and grown when a later call reaches
/// further.
pub struct Rotary {
    head_dim: usize,
    max_seq_len: usize,
    /// The inverse frequencies (d/2), F32 as transformers keeps them.
    inv_freq: Vec<f32>,
    /// The factor on cos and sin (YaRN's attention scaling; 1 otherwise).
    scale: f32,
    /// LongRoPE's or dynamic NTK's frequencies for calls that reach past the pretrained
    /// context.
    beyond: Option<Beyond>,
    tables: Mutex<Option<Tables>>,
}

/// Which frequencies a call rotates by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FrequencySet {
    /// The configured ones (within the pretrained context, or for every call).
    Configured,
    /// Those of a call reaching this many positions past the pretrained context (one set for
    /// LongRoPE whatever the length, so it is keyed by 0 there).
    Beyond(usize),
}

struct Tables {
    device: Device,
    set: FrequencySet,
    rows: usize,
    cos: Tensor,
    sin: Tensor,
}

/// Frequencies as F32, as transformers keeps them.
fn to_f32(f: Vec<f64>) -> Vec<f32> {
    f.into_iter().map(|f| f as f32).collect()
}

/// The fewest rows a table is made with, so short prompts do not regrow it every step.
const MIN_ROWS: usize = 256;

/// Which positions the rows of a [batch, heads, seq, head_dim] input sit at.
#[derive(Clone, Copy)]
pub enum Positions<'a> {
    /// Every sequence at offset, offset + 1, ...
    From(usize),
    /// Per batch row and step: ids [batch, seq] (I64), for left-padded batches, every one
    /// below `end`.
    PerRow { ids: &'a Tensor, end: usize },
}

impl Rotary {
    pub fn new(head_dim: usize, max_seq_len: usize, theta: f64) -> Self {
        Self::scaled(head_dim, max_seq_len, theta, None)
    }

    /// Rotations with the frequencies (and cos/sin factor) of a RoPE scaling.
    pub fn scaled(
        head_dim: usize,
        max_seq_len: usize,
        theta: f64,
        scaling: Option<&RopeScaling>,
    ) -> Self {
        let (freqs, scale) = match scaling {
            Some(s) => s.frequencies(head_dim, theta, max_seq_len),
            None => (base_frequencies(head_dim, theta), 1.0),
        };
        Rotary {
            head_dim,
            max_seq_len,
            inv_freq: to_f32(freqs),
            scale: scale as f32,
            beyond: scaling.and_then(|s| s.beyond(head_dim, theta)),
            tables: Mutex::new(None),
        }
    }

    /// The frequencies a call that reaches position `reach` rotates by.
    fn set_for(&self, reach: usize) -> FrequencySet {
        match &self.beyond {
            Some(b) if reach > b.context() => FrequencySet::Beyond(match b {
                Beyond::Long { .. } => 0,
                Beyond::Dynamic { .. } => reach,
            }),
            _ => FrequencySet::Configured,
        }
    }

    /// cos and sin of every (position, dim) as F32, computed the way `transformers` does: the
    /// inverse frequencies in F32, then position * inv_freq in F32 (times the scaling's
    /// factor).
    pub(super) fn host_tables(&self, rows: usize) -> (Vec<f32>, Vec<f32>) {
        self.host_tables_of(rows, FrequencySet::Configured)
    }

    fn host_tables_of(&self, rows: usize, set: FrequencySet) -> (Vec<f32>, Vec<f32>) {
        let beyond;
        let inv_freq = match (&self.beyond, set) {
            (Some(b), FrequencySet::Beyond(reach)) => {
                beyond = to_f32(b.frequencies(reach));
                &beyond
            }
            _ => &self.inv_freq,
        };
        let half = self.head_dim / 2;
        let n = rows * self.head_dim;
        let (mut cos, mut sin) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for pos in 0..rows {
            for j in 0..self.head_dim {
                let angle = pos as f32 * inv_freq[j % half];
                cos.push(angle.cos() * self.scale);
                sin.push(angle.sin() * self.scale);
            }
        }
        (cos, sin)
    }

    /// Tables on `device` covering at least positions `0..end` (`end <= max_seq_len`), of
    /// the frequencies of a call that reaches `end`.
    fn tables(&self, device: Device, end: usize) -> Result<(Tensor, Tensor)> {
        let set = self.set_for(end);
        let mut slot = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = slot.as_ref() {
            if t.device == device && t.rows >= end && t.set == set {
                return Ok((t.cos.clone(), t.sin.clone()));
            }
        }
        let rows = end
            .max(MIN_ROWS)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX)
            .min(self.max_seq_len);
        let (c, s) = self.host_tables_of(rows, set);
        let shape = [rows, self.head_dim];
        let cos = Tensor::from_vec(c, &shape)?.to_device(device)?;
        let sin = Tensor::from_vec(s, &shape)?.to_device(device)?;
        *slot = Some(Tables {
            device,
            set,
            rows,
            cos: cos.clone(),
            sin: sin.clone(),
        });
        Ok((cos, sin))
    }

    /// Handles to the tables made so far (none before first use): a CUDA graph that read them
    /// holds them, so that a regrowth elsewhere does not free them under its replays.
    pub fn held_tables(&self) -> Vec<Tensor> {
        let slot = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref()
            .map_or(Vec::new(), |t| vec![t.cos.clone(), t.sin.clone()])
    }

    /// How many table rows the tables hold now (0 before first use).
    pub fn rows(&self) -> usize {
        let slot = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref().map_or(0, |t| t.rows)
    }

    /// cos and sin (F32) broadcastable against x [batch, heads, seq, head_dim].
    fn angles(&self, x: &Tensor, positions: &Positions) -> Result<(Tensor, Tensor)> {
        self.angles_for(x.shape()[2], x.device(), positions)
    }

    /// cos and sin (F32) for `seq` new tokens at `positions` on `device`, broadcastable against
    /// [batch, heads, seq, head_dim].
    pub fn angles_for(
        &self,
        seq: usize,
        device: Device,
        positions: &Positions,
    ) -> Result<(Tensor, Tensor)> {
        self.angles_reaching(seq, device, positions, 0)
    }

    /// `angles_for` in a sequence that will reach `reach` positions (a cache's capacity):
    /// LongRoPE picks its frequencies by the whole sequence, so that a prompt and the decode
    /// steps after it rotate alike.
    pub fn angles_reaching(
        &self,
        seq: usize,
        device: Device,
        positions: &Positions,
        reach: usize,
    ) -> Result<(Tensor, Tensor)> {
        let (start, end) = match positions {
            Positions::From(offset) => (*offset, offset.saturating_add(seq)),
            Positions::PerRow { ids, end } => return self.gather(device, ids, reach.max(*end)),
        };
        self.check_end(start, end)?;
        let (cos, sin) = self.tables(device, reach.max(end))?;
        Ok((cos.narrow(0, start, seq)?, sin.narrow(0, start, seq)?))
    }

    /// cos and sin [batch, 1, seq, head_dim] at ids [batch, seq] (I64 on `device`, every one
    /// below `end`), read through the ids on the device: the host never sees the positions.
    pub fn gather(&self, device: Device, ids: &Tensor, end: usize) -> Result<(Tensor, Tensor)> {
        self.check_end(0, end)?;
        let (cos, sin) = self.tables(device, end)?;
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        let flat = ids.flatten()?;
        let shape = [b, 1, t, self.head_dim];
        Ok((
            cos.index_select(0, &flat)?.reshape_to(&shape)?,
            sin.index_select(0, &flat)?.reshape_to(&shape)?,
        ))
    }

    fn check_end(&self, start: usize, end: usize) -> Result<()> {
        if end > self.max_seq_len {
            return Err(crate::Error::invalid(
                "rotary embedding",
                format!(
                    "positions {start}..{end} exceed max_seq_len {}",
                    self.max_seq_len
                ),
            ));
        }
        Ok(())
    }

    /// x * cos + rotate_half(x) * sin, where rotate_half([a, b]) = [-b, a] over the last dim.
    pub fn apply(&self, x: &Tensor, positions: &Positions) -> Result<Tensor> {
        let (cos, sin) = self.angles(x, positions)?;
        x.rotary_embedding(&cos, &sin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn rotation_pairs_each_dim_with_the_one_half_a_head_away() {
        // head_dim 4: dims (0, 2) rotate by pos * 1, dims (1, 3) by pos * theta^-0.5.
        let rope = Rotary::new(4, 8, 100.0);
        let x = Tensor::from_vec(vec![1f32, 0., 0., 0.], &[1, 1, 1, 4]).unwrap();
        let y = rope
            .apply(&x, &Positions::From(3))
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let expect = [3f32.cos(), 0.0, 3f32.sin(), 0.0];
        for (a, b) in y.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{y:?} vs {expect:?}");
        }
        let x = Tensor::from_vec(vec![0f32, 1., 0., 0.], &[1, 1, 1, 4]).unwrap();
        let y = rope
            .apply(&x, &Positions::From(3))
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let a = 3.0 * 0.1f32;
        assert!(
            (y[1] - a.cos()).abs() < 1e-6 && (y[3] - a.sin()).abs() < 1e-6,
            "{y:?}"
        );
    }

    #[test]
    fn per_row_positions_match_a_shared_offset() {
        let rope = Rotary::new(4, 16, 10000.0);
        let x = Tensor::randn(&[2, 3, 5, 4], DType::F32, None).unwrap();
        let shared = rope.apply(&x, &Positions::From(2)).unwrap();
        let ids =
            Tensor::from_vec((0..10).map(|i| 2 + i % 5).collect::<Vec<i64>>(), &[2, 5]).unwrap();
        let per_row = rope
            .apply(&x, &Positions::PerRow { ids: &ids, end: 7 })
            .unwrap();
        assert_eq!(shared.to_vec_f32().unwrap(), per_row.to_vec_f32().unwrap());
    }

    #[test]
    fn tables_cover_the_positions_used_not_max_seq_len() {
        let rope = Rotary::new(4, 1 << 30, 10000.0);
        let x = Tensor::zeros(&[1, 1, 3, 4], DType::F32, Device::Cpu).unwrap();
        rope.apply(&x, &Positions::From(0)).unwrap();
        assert_eq!(rope.rows(), MIN_ROWS);
        // A later position grows them, to the next power of two; the values stay the same.
        let near = rope.apply(&x, &Positions::From(250)).unwrap();
        rope.apply(&x, &Positions::From(1000)).unwrap();
        assert_eq!(rope.rows(), 1024);
        let again = rope.apply(&x, &Positions::From(250)).unwrap();
        assert_eq!(near.to_vec_f32().unwrap(), again.to_vec_f32().unwrap());
    }

    #[test]
    fn positions_past_the_table_are_an_error() {
        let rope = Rotary::new(4, 4, 10000.0);
        let x = Tensor::zeros(&[1, 1, 2, 4], DType::F32, Device::Cpu).unwrap();
        assert!(rope.apply(&x, &Positions::From(3)).is_err());
    }
}
