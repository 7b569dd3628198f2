//! The device side of a fused optimizer's step counting (`fused.rs`): the counter buffer the
//! update kernels advance, the snapshot of its head read back without waiting, and the
//! warnings for steps the device skipped.

use super::fused::device_slice;
use super::optimizer::OptimizerCore;
use crate::backend::cuda::optim::{COUNTER_HEAD, SKIP_LOG};
use crate::backend::cuda::readback::Readback;
use crate::backend::cuda::CudaDevice;
use crate::{Device, Result, Tensor};
use std::sync::Arc;

/// The device side of an optimizer's step counting: the counter buffer (applied steps, skipped
/// steps, a log of the last skips, one step count per parameter), a snapshot of its head, and
/// what the host has already reported.
pub(super) struct DeviceSteps {
    pub(super) counters: Tensor,
    pub(super) snapshot: Readback,
    /// Skipped steps already warned about.
    pub(super) reported: u64,
    /// A read found skips that the host's counts do not reflect yet.
    pub(super) needs_refresh: bool,
    /// The host's step and rate when the buffer was made: a corrected count that falls back to
    /// `base_step` also falls back to `base_lr`.
    pub(super) base_step: u64,
    pub(super) base_lr: f64,
    /// `OptimizerCore::warn_skips`, copied at each step (it may change between steps).
    pub(super) warn: bool,
}

impl DeviceSteps {
    pub(super) fn new(dev: &Arc<CudaDevice>, core: &OptimizerCore) -> Result<DeviceSteps> {
        let n = core.params().len();
        let mut init = vec![0i64; COUNTER_HEAD + n];
        init[0] = core.step as i64;
        init[1] = core.skipped as i64;
        for (i, st) in core.states.iter().enumerate().take(n) {
            if let Some(st) = st {
                init[COUNTER_HEAD + i] = st.step as i64;
            }
        }
        let counters =
            Tensor::from_vec(init, &[COUNTER_HEAD + n])?.to_device(Device::Cuda(dev.ordinal()))?;
        Ok(DeviceSteps {
            counters,
            snapshot: Readback::new(dev, COUNTER_HEAD * 8)?,
            reported: core.skipped,
            needs_refresh: false,
            base_step: core.step,
            base_lr: core.lr,
            warn: core.warn_skips,
        })
    }

    pub(super) fn ptr(&self) -> Result<u64> {
        Ok(device_slice(&self.counters)?.ptr)
    }

    /// Every counter, after all queued work (a synchronization); warns about new skips.
    pub(super) fn read(&mut self) -> Result<Vec<i64>> {
        let c = self.counters.to_vec::<i64>()?;
        self.report(&c);
        Ok(c)
    }

    pub(super) fn report(&mut self, head: &[i64]) {
        let messages = skip_messages(head, self.reported);
        if messages.is_empty() {
            return;
        }
        if self.warn {
            for m in &messages {
                crate::messages::warn(m);
            }
        }
        self.reported = head[1].max(0) as u64;
        self.needs_refresh = true;
    }
}

impl Drop for DeviceSteps {
    /// Warns about skips that nobody has read yet (this waits for the device once).
    fn drop(&mut self) {
        if let Ok(c) = self.counters.to_vec::<i64>() {
            self.report(&c);
        }
    }
}

/// The warnings for skips `reported..` recorded in the head of a counter buffer; the step
/// number and norm come from the device's skip log, which keeps the last `SKIP_LOG`.
fn skip_messages(head: &[i64], reported: u64) -> Vec<String> {
    let total = head.get(1).copied().unwrap_or(0).max(0) as u64;
    if total <= reported || head.len() < COUNTER_HEAD {
        return Vec::new();
    }
    let new = total - reported;
    let logged = new.min(SKIP_LOG as u64);
    let mut out = Vec::new();
    if new > logged {
        out.push(format!(
            "{} more optimizer steps were skipped on the device for a non-finite gradient norm \
             (only the last {SKIP_LOG} are listed)",
            new - logged
        ));
    }
    for k in total - logged..total {
        let e = 2 + 2 * (k as usize % SKIP_LOG);
        let norm = f64::from_bits(head[e + 1] as u64);
        out.push(format!(
            "optimizer step {} skipped: the gradient norm is {norm}; parameters were not updated \
             (found on the device, so the gradients were kept)",
            head[e]
        ));
    }
    out
}

/// Native-endian i64 words of a readback.
pub(super) fn words(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks_exact(8)
        .map(|w| i64::from_ne_bytes(w.try_into().expect("chunks of 8")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(applied: i64, skipped: i64, log: &[(usize, i64, f64)]) -> Vec<i64> {
        let mut h = vec![0i64; COUNTER_HEAD];
        (h[0], h[1]) = (applied, skipped);
        for &(k, step, norm) in log {
            h[2 + 2 * k] = step;
            h[3 + 2 * k] = norm.to_bits() as i64;
        }
        h
    }

    #[test]
    fn skip_messages_name_each_new_skip_with_its_step_and_norm() {
        let h = head(3, 2, &[(0, 2, f64::NAN), (1, 4, f64::INFINITY)]);
        assert!(skip_messages(&h, 2).is_empty());
        let m = skip_messages(&h, 1);
        assert_eq!(m.len(), 1);
        assert!(
            m[0].starts_with("optimizer step 4 skipped: the gradient norm is inf"),
            "{m:?}"
        );
        let m = skip_messages(&h, 0);
        assert!(
            m[0].starts_with("optimizer step 2 skipped: the gradient norm is NaN"),
            "{m:?}"
        );
    }

    #[test]
    fn skip_messages_summarize_what_the_log_no_longer_holds() {
        let log: Vec<(usize, i64, f64)> = (0..SKIP_LOG)
            .map(|k| (k, 100 + k as i64, f64::NAN))
            .collect();
        let h = head(0, SKIP_LOG as i64 + 5, &log);
        let m = skip_messages(&h, 0);
        assert_eq!(m.len(), SKIP_LOG + 1);
        assert!(
            m[0].starts_with("5 more optimizer steps were skipped"),
            "{m:?}"
        );
    }
}
