//! Gradient buckets for the data-parallel all-reduce. Backward produces the gradients roughly
//! in the reverse order of the parameters, so buckets are filled from the last parameter
//! backwards. A bucket's all-reduce starts once its last gradient is ready and every bucket
//! before it has started (`dist::GradReducer`), on the communicator's stream, while backward
//! goes on with the earlier layers (PyTorch DDP's scheme, with its 25 MB default). One bucket
//! holds one dtype, since a collective moves one dtype.

use crate::DType;

/// About 25 MB a bucket: large enough that NCCL runs near its bandwidth, small enough that the
/// first buckets are in flight early in backward.
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// Parameters (indices into the list given to [`plan`]) reduced together.
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    pub params: Vec<usize>,
    pub dtype: DType,
    /// Elements of all its gradients together.
    pub numel: usize,
}

impl Bucket {
    pub fn bytes(&self) -> usize {
        self.numel * self.dtype.size_in_bytes()
    }
}

/// Buckets for gradients of `(numel, dtype)` each, in parameter order, of at most
/// `bucket_bytes` unless one gradient alone is larger (it gets a bucket of its own). Empty
/// gradients are left out: there is nothing to reduce.
pub fn plan(grads: &[(usize, DType)], bucket_bytes: usize) -> Vec<Bucket> {
    let mut buckets: Vec<Bucket> = Vec::new();
    for (i, &(numel, dtype)) in grads.iter().enumerate().rev() {
        if numel == 0 {
            continue;
        }
        let fits = buckets.last().is_some_and(|b| {
            b.dtype == dtype && (b.numel + numel) * dtype.size_in_bytes() <= bucket_bytes
        });
        if !fits {
            buckets.push(Bucket {
                params: Vec::new(),
                dtype,
                numel: 0,
            });
        }
        let b = buckets.last_mut().expect("pushed above");
        b.params.push(i);
        b.numel += numel;
    }
    buckets
}

/// Which buckets are complete as gradients arrive: backward marks each parameter whose
/// gradient is final, and learns when that completes its bucket (the reducer starts it once
/// the buckets before it have started). `reset` starts the next step.
#[derive(Debug)]
pub struct Readiness {
    /// The bucket of each parameter (`None`: not in any, an empty gradient).
    bucket_of: Vec<Option<usize>>,
    /// Gradients each bucket still waits for.
    waiting: Vec<usize>,
    sizes: Vec<usize>,
    marked: Vec<bool>,
}

impl Readiness {
    pub fn new(buckets: &[Bucket], params: usize) -> Readiness {
        let mut bucket_of = vec![None; params];
        for (b, bucket) in buckets.iter().enumerate() {
            for &p in &bucket.params {
                bucket_of[p] = Some(b);
            }
        }
        let sizes: Vec<usize> = buckets.iter().map(|b| b.params.len()).collect();
        Readiness {
            bucket_of,
            waiting: sizes.clone(),
            sizes,
            marked: vec![false; params],
        }
    }

    /// Marks parameter `p`'s gradient as final; returns its bucket when `p` was the last it
    /// waited for. Marking a parameter twice in a step counts once.
    pub fn mark(&mut self, p: usize) -> Option<usize> {
        let b = (*self.bucket_of.get(p)?)?;
        if std::mem::replace(&mut self.marked[p], true) {
            return None;
        }
        self.waiting[b] -= 1;
        (self.waiting[b] == 0).then_some(b)
    }

    /// The buckets not complete yet: some parameter of theirs has not been marked (it got no
    /// gradient this step, or its backward has not reached it).
    pub fn incomplete(&self) -> Vec<usize> {
        (0..self.waiting.len())
            .filter(|&b| !self.is_complete(b))
            .collect()
    }

    /// Whether every gradient of bucket `b` has been marked.
    pub fn is_complete(&self, b: usize) -> bool {
        self.waiting[b] == 0
    }

    pub fn reset(&mut self) {
        self.waiting.clone_from(&self.sizes);
        self.marked.iter_mut().for_each(|m| *m = false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_fill_from_the_last_parameter_up_to_the_cap() {
        // F32: 100 elements are 400 bytes; a cap of 1000 bytes takes two of them.
        let grads = [(100, DType::F32); 5];
        let b = plan(&grads, 1000);
        let params: Vec<Vec<usize>> = b.iter().map(|b| b.params.clone()).collect();
        assert_eq!(params, [vec![4, 3], vec![2, 1], vec![0]]);
        assert_eq!(b[0].bytes(), 800);
    }

    #[test]
    fn a_gradient_larger_than_the_cap_gets_a_bucket_of_its_own() {
        let b = plan(
            &[(10, DType::F32), (1000, DType::F32), (10, DType::F32)],
            100,
        );
        let params: Vec<Vec<usize>> = b.iter().map(|b| b.params.clone()).collect();
        assert_eq!(params, [vec![2], vec![1], vec![0]]);
    }

    #[test]
    fn a_bucket_holds_one_dtype_and_empty_gradients_none() {
        let grads = [
            (10, DType::F32),
            (10, DType::BF16),
            (0, DType::BF16),
            (10, DType::BF16),
        ];
        let b = plan(&grads, 1 << 20);
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].params.clone(), b[0].dtype), (vec![3, 1], DType::BF16));
        assert_eq!((b[1].params.clone(), b[1].dtype), (vec![0], DType::F32));
    }

    #[test]
    fn a_bucket_is_ready_when_its_last_gradient_is_marked_once() {
        let buckets = plan(&[(100, DType::F32); 4], 800);
        let mut r = Readiness::new(&buckets, 4);
        assert_eq!(r.mark(3), None);
        assert_eq!(
            r.mark(3),
            None,
            "a second mark of the same gradient counts once"
        );
        assert_eq!(r.mark(2), Some(0));
        assert_eq!(r.mark(0), None);
        assert_eq!(r.incomplete(), [1]);
        assert_eq!(r.mark(1), Some(1));
        assert!(r.incomplete().is_empty());
        r.reset();
        assert_eq!(r.incomplete(), [0, 1]);
        assert_eq!(
            r.mark(9),
            None,
            "an index beyond the parameters is no bucket's"
        );
    }
}
