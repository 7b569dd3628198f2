//! Rotary position embeddings in Hugging Face LLaMA's rotate-half layout: a head vector's first
//! half pairs with its second half (x_i with x_{i + d/2}), both rotated by angle
//! position * theta^(-2i/d). Checkpoints trained either way therefore agree on which weights
//! mean what.

use crate::{Device, Result, Tensor};
use std::sync::Mutex;

/// The cos and sin tables [max_seq_len, head_dim], made once per device on first use.
pub struct Rotary {
    head_dim: usize,
    max_seq_len: usize,
    theta: f64,
    tables: Mutex<Option<(Device, Tensor, Tensor)>>,
}

/// Which positions the rows of a [batch, heads, seq, head_dim] input sit at.
pub enum Positions<'a> {
    /// Every sequence at offset, offset + 1, ...
    From(usize),
    /// Per batch row and step: ids [batch, seq] (I64), for left-padded batches.
    PerRow(&'a Tensor),
}

impl Rotary {
    pub fn new(head_dim: usize, max_seq_len: usize, theta: f64) -> Self {
        Rotary {
            head_dim,
            max_seq_len,
            theta,
            tables: Mutex::new(None),
        }
    }

    /// cos and sin of every (position, dim) as F32, computed the way `transformers` does: the
    /// inverse frequencies in F32, then position * inv_freq in F32.
    fn host_tables(&self) -> (Vec<f32>, Vec<f32>) {
        let half = self.head_dim / 2;
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| (1.0 / self.theta.powf((2 * i) as f64 / self.head_dim as f64)) as f32)
            .collect();
        let n = self.max_seq_len * self.head_dim;
        let (mut cos, mut sin) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for pos in 0..self.max_seq_len {
            for j in 0..self.head_dim {
                let angle = pos as f32 * inv_freq[j % half];
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        (cos, sin)
    }

    fn tables(&self, device: Device) -> Result<(Tensor, Tensor)> {
        let mut slot = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((d, c, s)) = slot.as_ref() {
            if *d == device {
                return Ok((c.clone(), s.clone()));
            }
        }
        let (c, s) = self.host_tables();
        let shape = [self.max_seq_len, self.head_dim];
        let c = Tensor::from_vec(c, &shape)?.to_device(device)?;
        let s = Tensor::from_vec(s, &shape)?.to_device(device)?;
        *slot = Some((device, c.clone(), s.clone()));
        Ok((c, s))
    }

    /// cos and sin (F32) broadcastable against x [batch, heads, seq, head_dim].
    fn angles(&self, x: &Tensor, positions: &Positions) -> Result<(Tensor, Tensor)> {
        let seq = x.shape()[2];
        let (cos, sin) = self.tables(x.device())?;
        let (cos, sin) = match positions {
            Positions::From(offset) => {
                if offset + seq > self.max_seq_len {
                    return Err(crate::Error::invalid(
                        "rotary embedding",
                        format!(
                            "positions {offset}..{} exceed max_seq_len {}",
                            offset + seq,
                            self.max_seq_len
                        ),
                    ));
                }
                (cos.narrow(0, *offset, seq)?, sin.narrow(0, *offset, seq)?)
            }
            Positions::PerRow(ids) => {
                let (b, t) = (ids.shape()[0], ids.shape()[1]);
                let flat = ids.flatten()?;
                let shape = [b, 1, t, self.head_dim];
                (
                    cos.index_select(0, &flat)?.reshape_to(&shape)?,
                    sin.index_select(0, &flat)?.reshape_to(&shape)?,
                )
            }
        };
        Ok((cos, sin))
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
        let per_row = rope.apply(&x, &Positions::PerRow(&ids)).unwrap();
        assert_eq!(shared.to_vec_f32().unwrap(), per_row.to_vec_f32().unwrap());
    }

    #[test]
    fn positions_past_the_table_are_an_error() {
        let rope = Rotary::new(4, 4, 10000.0);
        let x = Tensor::zeros(&[1, 1, 2, 4], DType::F32, Device::Cpu).unwrap();
        assert!(rope.apply(&x, &Positions::From(3)).is_err());
    }
}
