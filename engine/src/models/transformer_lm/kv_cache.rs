//! Keys and values of the tokens seen so far, one pair of preallocated buffers per layer
//! [batch, kv_heads, capacity, head_dim], written in place so a decode step costs no copy of
//! the history.
//!
//! Two ways in, both written by the layer's ops (`ops::pre_norm::CacheWrite`). A prompt
//! (`appending`) writes at the host's count of filled positions. A decode step (`at_cursor`)
//! writes at the cursor, the device's copy of that count, and sees the window
//! `first_keys[b] ..= cursor`; the host refreshes the cursor before each step
//! (`sync_cursor`), so one captured CUDA graph serves every position.

use super::LmConfig;
use crate::ops::pre_norm::CacheWrite;
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
    /// 0..capacity on the device, I64 [1, capacity]: what a step's window bounds are compared
    /// with where the mask is built as a bias (soft-capped layers), with no host copy in the
    /// step.
    key_positions: Tensor,
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
            key_positions: Tensor::from_vec((0..capacity as i64).collect(), &[1, capacity])?
                .to_device(device)?,
        })
    }

    /// 0..capacity, I64 [1, capacity] on the cache's device.
    pub fn key_positions(&self) -> &Tensor {
        &self.key_positions
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

    /// The device's copy of `len` (I64 [1]), where a decode step writes (`at_cursor`).
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

    /// Where a prompt's layer `layer` writes its keys and values: after the positions filled
    /// so far (the host checks the room first, `check_room`).
    pub fn appending(&self, layer: usize) -> CacheWrite<'_> {
        let (k, v) = &self.layers[layer];
        CacheWrite::Append { k, v, at: self.len }
    }

    /// Where a decode step's layer `layer` writes its keys and values: at the device cursor.
    pub fn at_cursor(&self, layer: usize) -> CacheWrite<'_> {
        let (k, v) = &self.layers[layer];
        CacheWrite::AtCursor {
            k,
            v,
            cursor: &self.cursor,
        }
    }

    /// Marks `steps` positions as written (after every layer appended them).
    pub fn advance(&mut self, steps: usize) {
        self.len += steps;
    }

    /// Forgets every position from `len` on (speculative decoding drops the draft tokens the
    /// target rejected); the next write lands there.
    pub fn rewind(&mut self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(Error::invalid(
                "KvCache",
                format!(
                    "cannot rewind to {len} positions: only {} are filled",
                    self.len
                ),
            ));
        }
        self.len = len;
        Ok(())
    }

    /// Row i takes the keys and values of row `rows[i]` (beam search continues the beams it
    /// keeps). Written in place, so a captured decode step still finds its buffers. Rows may
    /// only move between rows of the same padding.
    pub fn reorder_rows(&mut self, rows: &[usize]) -> Result<()> {
        let n = self.pads.len();
        if rows.len() != n || rows.iter().any(|&r| r >= n) {
            return Err(Error::invalid(
                "KvCache",
                format!("a reorder of the cache's {n} rows got {rows:?}"),
            ));
        }
        if let Some(i) = (0..n).find(|&i| self.pads[rows[i]] != self.pads[i]) {
            return Err(Error::invalid(
                "KvCache",
                format!(
                    "row {i} (padding {}) cannot take row {} (padding {})",
                    self.pads[i], rows[i], self.pads[rows[i]]
                ),
            ));
        }
        if self.len == 0 || rows.iter().enumerate().all(|(i, &r)| i == r) {
            return Ok(());
        }
        let device = self.cursor.device();
        let index =
            Tensor::from_vec(rows.iter().map(|&r| r as i64).collect(), &[n])?.to_device(device)?;
        let filled = self.len;
        no_grad(|| {
            for (k, v) in &self.layers {
                for t in [k, v] {
                    let t = t.narrow(2, 0, filled)?;
                    t.copy_(&t.index_select(0, &index)?)?;
                }
            }
            Ok(())
        })
    }
}
