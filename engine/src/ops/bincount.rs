//! `bincount`: how often each non-negative integer occurs in a 1-D tensor, as `torch.bincount`
//! without weights. Counted on the host (a CUDA tensor is copied there and the counts back;
//! there is no kernel). The output length comes from the data, so it is checked against the
//! memory available before it is allocated: one stray huge id is an error, not an abort.

use crate::tensor::memory::check_alloc;
use crate::{bail, DType, Error, Result, Tensor};

impl Tensor {
    /// Counts (I64) of each value 0..=max of a 1-D integer tensor, with at least `minlength`
    /// entries. A negative value or a float or bool tensor is an error.
    pub fn bincount(&self, minlength: usize) -> Result<Tensor> {
        if !self.dtype().is_int() {
            return Err(Error::UnsupportedDType {
                op: "bincount",
                dtype: self.dtype(),
                detail: ": needs non-negative integers (u8, u32 or i64); cast class ids with .to(\"i64\")".into(),
            });
        }
        if self.rank() != 1 {
            bail!(
                "bincount",
                "needs a 1-D tensor, got shape {:?}",
                self.shape()
            );
        }
        let values = self.to_vec::<i64>()?;
        if let Some((i, v)) = values.iter().enumerate().find(|(_, &v)| v < 0) {
            bail!("bincount", "value {v} at index {i} is negative");
        }
        let max = values.iter().copied().max();
        let len = match max {
            Some(m) => usize::try_from(m)
                .ok()
                .and_then(|m| m.checked_add(1))
                .ok_or_else(|| {
                    Error::invalid("bincount", format!("value {m} is too large to count"))
                })?
                .max(minlength),
            None => minlength,
        };
        check_alloc("bincount", &[len], DType::I64, self.device())?;
        let mut counts = vec![0i64; len];
        for v in values {
            // Non-negative and at most max, checked above.
            counts[v as usize] += 1;
        }
        Tensor::from_vec(counts, &[len])?.to_device(self.device())
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    #[test]
    fn bincount_counts_each_value_up_to_the_largest() {
        let x = Tensor::from_vec(vec![1i64, 3, 1, 0, 3, 3], &[6]).unwrap();
        let c = x.bincount(0).unwrap();
        assert_eq!(c.dtype(), DType::I64);
        assert_eq!(c.to_vec::<i64>().unwrap(), [1, 2, 0, 3]);
    }

    #[test]
    fn bincount_pads_to_minlength() {
        let x = Tensor::from_vec(vec![1u8, 1], &[2]).unwrap();
        assert_eq!(
            x.bincount(4).unwrap().to_vec::<i64>().unwrap(),
            [0, 2, 0, 0]
        );
    }

    #[test]
    fn bincount_of_an_empty_tensor_is_minlength_zeros() {
        let x = Tensor::from_vec(Vec::<i64>::new(), &[0]).unwrap();
        assert_eq!(x.bincount(0).unwrap().shape(), &[0]);
        assert_eq!(x.bincount(2).unwrap().to_vec::<i64>().unwrap(), [0, 0]);
    }

    #[test]
    fn bincount_of_a_negative_value_names_it_and_its_index() {
        let x = Tensor::from_vec(vec![0i64, 2, -3], &[3]).unwrap();
        let err = x.bincount(0).unwrap_err().to_string();
        assert!(err.starts_with("bincount:"), "{err}");
        assert!(err.contains("-3") && err.contains("index 2"), "{err}");
    }

    #[test]
    fn bincount_of_floats_is_an_error_naming_the_dtype() {
        let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
        let err = x.bincount(0).unwrap_err().to_string();
        assert!(err.contains("bincount") && err.contains("F32"), "{err}");
    }

    #[test]
    fn bincount_of_a_matrix_is_an_error_naming_the_shape() {
        let x = Tensor::from_vec(vec![1i64, 2], &[1, 2]).unwrap();
        let err = x.bincount(0).unwrap_err().to_string();
        assert!(err.contains("1-D") && err.contains("[1, 2]"), "{err}");
    }

    #[test]
    fn bincount_of_a_huge_value_is_an_error_not_an_abort() {
        let x = Tensor::from_vec(vec![1i64 << 62], &[1]).unwrap();
        let err = x.bincount(0).unwrap_err().to_string();
        assert!(err.contains("bincount"), "{err}");
    }
}
