//! Keys and values of the tokens seen so far, one pair of preallocated buffers per layer
//! [batch, kv_heads, capacity, head_dim], written in place so a decode step costs no copy of
//! the history.

use super::LmConfig;
use crate::{no_grad, DType, Device, Error, Result, Tensor};

pub struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
    len: usize,
    capacity: usize,
    /// Left padding per batch row (sequences of different lengths share one batch).
    pads: Vec<usize>,
}

impl KvCache {
    pub fn new(
        config: &LmConfig,
        batch: usize,
        capacity: usize,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        if capacity > config.max_seq_len {
            return Err(Error::invalid(
                "KvCache",
                format!(
                    "{capacity} positions exceed the model's max_seq_len {}",
                    config.max_seq_len
                ),
            ));
        }
        let shape = [batch, config.n_kv_heads, capacity, config.head_dim()];
        // Each buffer alone may fit where all of them together do not.
        let all = [
            2 * config.n_layers,
            batch,
            config.n_kv_heads,
            capacity,
            config.head_dim(),
        ];
        crate::tensor::memory::check_alloc("KvCache", &all, dtype, device)?;
        let layers = (0..config.n_layers)
            .map(|_| {
                Ok((
                    Tensor::zeros(&shape, dtype, device)?,
                    Tensor::zeros(&shape, dtype, device)?,
                ))
            })
            .collect::<Result<_>>()?;
        Ok(KvCache {
            layers,
            len: 0,
            capacity,
            pads: vec![0; batch],
        })
    }

    /// Positions filled so far (padding included).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn pads(&self) -> &[usize] {
        &self.pads
    }

    pub fn set_pads(&mut self, pads: Vec<usize>) {
        self.pads = pads;
    }

    /// Room for `steps` more positions, or an error naming the capacity.
    pub fn check_room(&self, steps: usize) -> Result<()> {
        if self.len + steps > self.capacity {
            return Err(Error::invalid(
                "KvCache",
                format!(
                    "{} cached + {steps} new positions exceed the capacity {}",
                    self.len, self.capacity
                ),
            ));
        }
        Ok(())
    }

    /// Writes layer `layer`'s new keys and values [batch, kv_heads, seq, head_dim] after the
    /// cached ones and returns views of everything cached, [batch, kv_heads, len + seq, hd].
    pub fn append(&self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let seq = k.shape()[2];
        self.check_room(seq)?;
        let (ck, cv) = &self.layers[layer];
        no_grad(|| -> Result<()> {
            ck.narrow(2, self.len, seq)?.copy_(k)?;
            cv.narrow(2, self.len, seq)?.copy_(v)
        })?;
        Ok((
            ck.narrow(2, 0, self.len + seq)?,
            cv.narrow(2, 0, self.len + seq)?,
        ))
    }

    /// Marks `steps` positions as written (after every layer appended them).
    pub fn advance(&mut self, steps: usize) {
        self.len += steps;
    }
}
