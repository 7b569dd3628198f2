//! Reading a tensor's values back to the host later: the copy is queued behind the work that
//! makes them, and taking it waits for that work alone, not for what was queued after (as
//! PyTorch's `.to("cpu", non_blocking=True)` with an event). A training loop reads its loss
//! this way while the backward it queued next keeps the device busy.

use crate::backend::cuda::{self, readback::Readback};
use crate::backend::{CpuStorage, Storage};
use crate::{DType, Device, Error, Result, Tensor};

/// A reusable host reader of one tensor at a time: its pinned buffer is kept between reads.
#[derive(Default)]
pub struct HostReader {
    /// The pinned buffer and event of CUDA reads, made on the first one (and again for a
    /// larger tensor or another device).
    cuda: Option<(usize, Readback)>,
    pending: Option<Pending>,
}

/// What the read in flight will give.
enum Pending {
    /// A CPU tensor: nothing to wait for.
    Ready(Tensor),
    /// A CUDA copy of a tensor of this shape and dtype into the readback.
    Cuda { shape: Vec<usize>, dtype: DType },
}

impl HostReader {
    pub fn new() -> HostReader {
        HostReader::default()
    }

    /// Queues a read of `t`'s values (a CPU tensor is copied now). A read still pending is
    /// taken and dropped first.
    pub fn start(&mut self, t: &Tensor) -> Result<()> {
        self.take()?;
        let ordinal = match t.device() {
            Device::Cpu => {
                // A copy: the values as they are now, as a CUDA read gives.
                self.pending = Some(Pending::Ready(crate::no_grad(|| t.contiguous_copy())?));
                return Ok(());
            }
            Device::Cuda(n) => n,
        };
        let t = t.contiguous()?;
        let bytes = t.numel() * t.dtype().size_in_bytes();
        let fits = matches!(&self.cuda, Some((o, r)) if *o == ordinal && r.capacity() >= bytes);
        if !fits {
            let dev = cuda::device(ordinal)?;
            self.cuda = Some((ordinal, Readback::new(&dev, bytes.max(64))?));
        }
        let (_, readback) = self.cuda.as_mut().expect("made above");
        let src = match &*t.storage() {
            Storage::Cuda(s) => s.ptr_at(t.layout().offset()),
            _ => return Err(Error::Cuda("a CUDA tensor without CUDA storage".into())),
        };
        // SAFETY: `src` addresses `bytes` bytes of `t`'s storage; frees are stream-ordered, so
        // dropping `t` after queuing the copy is safe.
        if !unsafe { readback.start(src, bytes)? } {
            // An earlier copy is still marked in flight (its wait failed): taking the buffer
            // now would return that copy's values as this one's.
            return Err(Error::Cuda(
                "a device read is still in flight from a read that failed".into(),
            ));
        }
        self.pending = Some(Pending::Cuda {
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
        });
        Ok(())
    }

    /// The values of the last `start` as a CPU tensor, waiting for their copy alone; `None`
    /// when no read is pending.
    pub fn take(&mut self) -> Result<Option<Tensor>> {
        match self.pending.take() {
            None => Ok(None),
            Some(Pending::Ready(t)) => Ok(Some(t)),
            Some(Pending::Cuda { shape, dtype }) => {
                let (_, readback) = self
                    .cuda
                    .as_mut()
                    .ok_or_else(|| Error::Cuda("a pending read without its buffer".into()))?;
                let bytes = readback.wait()?.unwrap_or_default();
                let storage = CpuStorage::from_le_bytes(&bytes, dtype).ok_or_else(|| {
                    Error::Cuda(format!("a readback of {} bytes for {dtype:?}", bytes.len()))
                })?;
                Tensor::from_storage(Storage::Cpu(storage), &shape).map(Some)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_tensor_reads_back_as_its_values_once() {
        let mut r = HostReader::new();
        assert!(r.take().unwrap().is_none());
        let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
        r.start(&t).unwrap();
        let got = r.take().unwrap().expect("a pending read");
        assert_eq!(got.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0]);
        assert!(r.take().unwrap().is_none());
    }
}
