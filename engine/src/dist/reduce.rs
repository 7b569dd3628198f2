//! Collectives on tensors: what the trainers call, in the engine's terms. NCCL does the work
//! (`backend::cuda::nccl`); this file turns tensors into the device ranges it reduces.

use super::buckets;
use super::Dist;
use crate::backend::cuda::nccl::Collective;
use crate::backend::cuda::optim::DevSlice;
use crate::backend::Storage;
use crate::{Device, Error, Result, Tensor};
use std::collections::HashMap;

/// The device range of a CUDA tensor whose elements fill it without gaps in some order (a
/// contiguous tensor or a permutation of one, such as a weight's gradient kept in the
/// weight's order). Every rank has the same layout, so the ranges line up element for
/// element. Takes the write lock for a moment, so a backward that saved the tensor fails
/// instead of reading the sums.
fn dense_slice(op: &'static str, t: &Tensor) -> Result<DevSlice> {
    if !t.layout().is_dense() {
        return Err(Error::invalid(
            op,
            "the tensor must be dense (contiguous or a permutation of it); reduce a contiguous copy",
        ));
    }
    match &*t.storage_cell().write() {
        Storage::Cuda(s) => Ok(DevSlice {
            ptr: s.ptr_at(t.layout().offset()),
            numel: t.numel(),
            dtype: t.dtype(),
        }),
        Storage::Cpu(_) => Err(cpu_ranks()),
    }
}

/// Why CPU tensors are not reduced across ranks.
fn cpu_ranks() -> Error {
    Error::invalid(
        "all_reduce",
        "tensors on the CPU cannot be summed across ranks: NCCL reduces CUDA memory; run \
         `brain launch --gpus N script --device cuda`",
    )
}

impl Dist {
    /// Whether a trainer reduces its gradients: in any run `brain launch` started, a run of
    /// one included, so that path runs on a single GPU too; not in a plain `brain run`.
    pub fn reduces(&self) -> bool {
        self.store.is_some()
    }

    /// Sums `t` over every rank, in place, queued on its device's stream. Every rank calls it
    /// with a tensor of the same shape, layout and dtype, in the same order. A run of one goes
    /// through NCCL too on CUDA (a communicator of one); on the CPU a run of one leaves `t` as
    /// it is, and more ranks are an error (NCCL reduces device memory only).
    pub fn all_reduce_sum_(&self, t: &Tensor) -> Result<()> {
        let ts = std::slice::from_ref(t);
        self.start_group(ts)?;
        self.wait_for_started(ts)
    }

    /// Sums the gradients of `params` over the ranks, in place, bucket by bucket (the
    /// gradients already computed; a trainer that reduces during its backward uses
    /// [`GradReducer`]). With several ranks a parameter without a gradient takes part with
    /// zeros: another rank may have one, and the collectives must pair up.
    pub fn all_reduce_grads(&self, params: &[Tensor]) -> Result<()> {
        self.grad_reducer(params, buckets::DEFAULT_BUCKET_BYTES)
            .finish()
    }

    /// A reducer for the gradients of `params` that one backward is about to compute, in
    /// buckets of about `bucket_bytes` ([`buckets::DEFAULT_BUCKET_BYTES`] unless a test wants more of them).
    pub fn grad_reducer(&self, params: &[Tensor], bucket_bytes: usize) -> GradReducer<'_> {
        let sizes: Vec<_> = params.iter().map(|p| (p.numel(), p.dtype())).collect();
        let buckets = buckets::plan(&sizes, bucket_bytes);
        GradReducer {
            dist: self,
            index: params
                .iter()
                .enumerate()
                .map(|(i, p)| (p.id(), i))
                .collect(),
            params: params.to_vec(),
            readiness: buckets::Readiness::new(&buckets, params.len()),
            next: 0,
            finished: false,
            buckets,
        }
    }

    /// Starts summing every tensor of `ts` over the ranks, in place, as one NCCL group on the
    /// communicator's stream. All on one device.
    fn start_group(&self, ts: &[Tensor]) -> Result<()> {
        let items: Vec<_> = ts.iter().map(|t| (t, Collective::Sum)).collect();
        self.start_collectives(&items)
    }

    /// Starts one collective on each tensor, in place, as one NCCL group on the
    /// communicator's stream. All on one device.
    pub(super) fn start_collectives(&self, items: &[(&Tensor, Collective)]) -> Result<()> {
        let ts: Vec<Tensor> = items.iter().map(|(t, _)| (*t).clone()).collect();
        let Some(ordinal) = self.reduced_on(&ts)? else {
            return Ok(());
        };
        let slices = items
            .iter()
            .map(|(t, c)| Ok((dense_slice("all_reduce", t)?, *c)))
            .collect::<Result<Vec<_>>>()?;
        let comm = self.communicator(ordinal)?;
        // SAFETY: each slice is its tensor's own dense range on `ordinal`, the communicator's
        // device; every rank starts the same collectives in the same order, and the device's
        // stream touches them again only after `wait_for_started`.
        unsafe { comm.start_group(&slices) }
    }

    /// Makes the device's stream (that of `ts`) wait for the sums started so far.
    pub(super) fn wait_for_started(&self, ts: &[Tensor]) -> Result<()> {
        match self.reduced_on(ts)? {
            Some(ordinal) => self.communicator(ordinal)?.wait_for_started(),
            None => Ok(()),
        }
    }

    /// The CUDA device `ts` are reduced on; `None` when there is nothing to do (no tensors, or
    /// CPU tensors in a run of one).
    fn reduced_on(&self, ts: &[Tensor]) -> Result<Option<usize>> {
        let Some(first) = ts.first() else {
            return Ok(None);
        };
        if let Some(t) = ts.iter().find(|t| t.device() != first.device()) {
            return Err(Error::invalid(
                "all_reduce",
                format!(
                    "tensors on {:?} and {:?}: one group reduces on one device",
                    first.device(),
                    t.device()
                ),
            ));
        }
        match first.device() {
            Device::Cpu if self.world_size == 1 => Ok(None),
            Device::Cpu => Err(cpu_ranks()),
            Device::Cuda(n) => Ok(Some(n)),
        }
    }
}

/// The all-reduce of one backward's gradients, bucket by bucket: the backward reports each
/// parameter whose gradient is complete (`Tensor::backward_notifying`), and a bucket starts
/// across the ranks as soon as all of its gradients are in, on the communicator's stream,
/// while the device goes on with the earlier layers. `finish` starts what is left and makes
/// the device's stream wait for the sums, before the optimizer reads them.
///
/// Buckets start strictly in plan order, each once every bucket before it has: NCCL pairs
/// collectives by the order each rank issues them, and a backward that completed two buckets
/// in a different order on two ranks would otherwise sum one bucket with another.
pub struct GradReducer<'a> {
    dist: &'a Dist,
    params: Vec<Tensor>,
    /// A parameter's index by its tensor's id.
    index: HashMap<usize, usize>,
    buckets: Vec<buckets::Bucket>,
    readiness: buckets::Readiness,
    /// The first bucket not started; all before it have.
    next: usize,
    /// Whether the device's stream already waits for everything started.
    finished: bool,
}

impl GradReducer<'_> {
    /// Notes that `leaf`'s gradient is complete (a leaf that is not one of the parameters is
    /// passed over); if that completes its bucket, starts it and every complete bucket after
    /// it, up to the first one still waiting.
    pub fn gradient_ready(&mut self, leaf: &Tensor) -> Result<()> {
        let Some(&p) = self.index.get(&leaf.id()) else {
            return Ok(());
        };
        if self.readiness.mark(p).is_some() {
            while self.next < self.buckets.len() && self.readiness.is_complete(self.next) {
                self.start_next()?;
            }
        }
        Ok(())
    }

    /// How many buckets have started so far.
    pub fn started(&self) -> usize {
        self.next
    }

    /// Starts every bucket not started yet, in plan order (the same on every rank), and makes
    /// the device's stream wait for all of them.
    pub fn finish(mut self) -> Result<()> {
        while self.next < self.buckets.len() {
            self.start_next()?;
        }
        self.wait()
    }

    /// Starts the next bucket in plan order: its gradients, as one group. A parameter this
    /// backward gave no gradient is left out in a run of one; with several ranks it gets a
    /// zero gradient that takes part, because another rank may have used it (its sum is then
    /// every rank's gradient) and the collectives of every rank must pair up (PyTorch DDP's
    /// unused parameters). A parameter no rank used thus steps on a zero gradient.
    fn start_next(&mut self) -> Result<()> {
        let b = self.next;
        self.next += 1;
        let mut members = Vec::with_capacity(self.buckets[b].params.len());
        for &i in &self.buckets[b].params {
            let p = &self.params[i];
            match p.grad() {
                Some(g) => members.push(g),
                None if self.dist.world_size > 1 => {
                    let zero = Tensor::zeros(p.shape(), p.dtype(), p.device())?;
                    p.set_grad(Some(zero.clone()));
                    members.push(zero);
                }
                None => {}
            }
        }
        self.dist.start_group(&members)
    }

    /// Makes the device's stream wait for the buckets started so far.
    fn wait(&mut self) -> Result<()> {
        self.finished = true;
        // The device of any gradient: they are all on the communicator's.
        let any: Vec<Tensor> = self
            .params
            .iter()
            .find_map(Tensor::grad)
            .into_iter()
            .collect();
        self.dist.wait_for_started(&any)
    }
}

/// A reducer dropped before `finish` (its backward failed, or finish returned an error) still
/// orders the device's stream after the sums it started: the gradients' memory must not be
/// reused or freed under a collective still writing it.
impl Drop for GradReducer<'_> {
    fn drop(&mut self) {
        if self.next > 0 && !self.finished {
            let _ = self.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    /// A chain of layers y = tanh(w_i * y + b_i): the backward completes the last layer's
    /// parameters first, and a bucket per parameter starts the moment its gradient is in, so
    /// every bucket has started before the backward returns; the gradients are unchanged (a
    /// run of one on the CPU sums nothing).
    #[test]
    fn every_bucket_starts_during_the_backward_that_completes_it() {
        let mut g = crate::Generator::new(3);
        let params: Vec<Tensor> = (0..6)
            .map(|_| {
                Tensor::randn(&[4], DType::F32, Some(&mut g))
                    .unwrap()
                    .requires_grad_()
                    .unwrap()
            })
            .collect();
        let x = Tensor::randn(&[4], DType::F32, Some(&mut g)).unwrap();
        let forward = || {
            let mut y = x.clone();
            for layer in params.chunks(2) {
                y = y
                    .mul(&layer[0])
                    .unwrap()
                    .add(&layer[1])
                    .unwrap()
                    .tanh()
                    .unwrap();
            }
            y.sum().unwrap()
        };
        forward().backward().unwrap();
        let want: Vec<Vec<f64>> = params
            .iter()
            .map(|p| p.grad().unwrap().to_vec_f64().unwrap())
            .collect();
        params.iter().for_each(|p| p.set_grad(None));

        let dist = Dist::single();
        // One parameter a bucket: 16 bytes each.
        let mut reducer = dist.grad_reducer(&params, 16);
        let mut started = Vec::new();
        forward()
            .backward_notifying(None, false, &mut |leaf| {
                reducer.gradient_ready(leaf)?;
                started.push(reducer.started());
                Ok(())
            })
            .unwrap();
        assert_eq!(
            started,
            [1, 2, 3, 4, 5, 6],
            "one more bucket with each gradient"
        );
        reducer.finish().unwrap();
        let got: Vec<Vec<f64>> = params
            .iter()
            .map(|p| p.grad().unwrap().to_vec_f64().unwrap())
            .collect();
        assert_eq!(got, want);
    }

    /// Buckets are planned from the last parameter up; a gradient that completes a later
    /// bucket first waits until every bucket before it has started, so the ranks issue their
    /// collectives in one order whatever order their backwards finished them in.
    #[test]
    fn buckets_start_in_plan_order_whatever_order_they_complete_in() {
        let params: Vec<Tensor> = (0..3)
            .map(|_| {
                let p = Tensor::zeros(&[4], DType::F32, Device::Cpu).unwrap();
                p.set_grad(Some(Tensor::ones(&[4], DType::F32, Device::Cpu).unwrap()));
                p
            })
            .collect();
        let dist = Dist::single();
        let mut reducer = dist.grad_reducer(&params, 16);
        let mut started = Vec::new();
        for p in [0, 2, 1] {
            reducer.gradient_ready(&params[p]).unwrap();
            started.push(reducer.started());
        }
        assert_eq!(started, [0, 1, 3]);
        reducer.finish().unwrap();
    }
}
