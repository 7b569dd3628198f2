//! Keys and values of the tokens seen so far, one pair of preallocated buffers per layer
//! [batch, kv_heads, capacity, head_dim], written in place so a decode step costs no copy of
//! the history.
//!
//! Two ways in. A prompt (`append`) writes at the host's count of filled positions. A decode
//! step (`rotate_and_write`) writes at the cursor, the device's copy of that count, and sees the
//! window `first_keys[b] ..= cursor`; the host refreshes the cursor before each step
//! (`sync_cursor`), so one captured CUDA graph serves every position.

use super::LmConfig;
use crate::ops::fused_linear::RotaryCache;
use crate::{no_grad, DType, Device, Error, Result, Tensor};

pub struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
    len: usize,
    capacity: usize,
    /// Left padding per batch row (sequences of different lengths share one batch).
    pads: Vec<usize>,
    /// `len` on the device, I64 [1].
    cursor: Tensor,
    /// `pads` on the device, I64 [batch]: each row's first real key.
    first_keys: Tensor,
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
            cursor: Tensor::zeros(&[1], DType::I64, device)?,
            first_keys: Tensor::zeros(&[batch], DType::I64, device)?,
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

    /// Sets each row's left padding; the device copy is written in place, so a graph that
    /// captured it stays valid.
    pub fn set_pads(&mut self, pads: Vec<usize>) -> Result<()> {
        if pads.len() != self.pads.len() {
            return Err(Error::invalid(
                "KvCache",
                format!(
                    "the cache holds {} sequences, got {} paddings",
                    self.pads.len(),
                    pads.len()
                ),
            ));
        }
        let host: Vec<i64> = pads.iter().map(|&p| p as i64).collect();
        let device = self.first_keys.device();
        no_grad(|| {
            self.first_keys
                .copy_(&Tensor::from_vec(host, &[pads.len()])?.to_device(device)?)
        })?;
        self.pads = pads;
        Ok(())
    }

    /// The device's copy of `len` (I64 [1]), where `write_at_cursor` writes.
    pub fn cursor(&self) -> &Tensor {
        &self.cursor
    }

    /// Each row's first real key on the device (I64 [batch]).
    pub fn first_keys(&self) -> &Tensor {
        &self.first_keys
    }

    /// Copies `len` to the device cursor (a host-to-device copy: not inside a captured step).
    pub fn sync_cursor(&self) -> Result<()> {
        let device = self.cursor.device();
        no_grad(|| {
            self.cursor
                .copy_(&Tensor::from_vec(vec![self.len as i64], &[1])?.to_device(device)?)
        })
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

    /// One decode step of layer `layer`: rotates q and k by the step's angles (cos, sin
    /// [batch, 1, 1, head_dim]), writes the rotated keys and the values [batch, kv_heads, 1,
    /// head_dim] at the cursor (one kernel on CUDA), and returns the rotated queries with the
    /// whole buffers [batch, kv_heads, capacity, hd]; what is visible is the caller's window
    /// (`first_keys ..= cursor`). The host checks the room (`check_room`) before the step.
    pub fn rotate_and_write(
        &self,
        layer: usize,
        qkv: [&Tensor; 3],
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<[Tensor; 3]> {
        let [q, k, v] = qkv;
        let c = self.rotary_target(layer, cos, sin);
        let q =
            crate::ops::rope::rotary_into_cache(q, k, v, cos, sin, c.k_cache, c.v_cache, c.cursor)?;
        Ok([q, c.k_cache.clone(), c.v_cache.clone()])
    }

    /// Where a decode step of layer `layer` rotated by the angles (cos, sin [batch, 1, 1,
    /// head_dim]) writes: that layer's buffers [batch, kv_heads, capacity, hd] at the cursor.
    /// For `Tensor::rms_norm_qkv_into_cache`, which writes them in the q/k/v products'
    /// epilogue; the host checks the room (`check_room`) before the step.
    pub fn rotary_target<'a>(
        &'a self,
        layer: usize,
        cos: &'a Tensor,
        sin: &'a Tensor,
    ) -> RotaryCache<'a> {
        let (k_cache, v_cache) = &self.layers[layer];
        RotaryCache {
            cos,
            sin,
            k_cache,
            v_cache,
            cursor: &self.cursor,
        }
    }

    /// Marks `steps` positions as written (after every layer appended them).
    pub fn advance(&mut self, steps: usize) {
        self.len += steps;
    }
}
