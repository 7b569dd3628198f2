//! Feature scaling and target encoding: a standardizer fitted once and applied to any split,
//! and one-hot encoding of class ids.

use super::Dataset;
use crate::{no_grad, DType, Error, Result, Tensor};

/// Per-column mean and standard deviation, fitted on one dataset (the training split) and then
/// applied unchanged to others, so the test split never leaks into the statistics.
#[derive(Clone, Debug)]
pub struct Standardizer {
    /// `[F]` f32.
    mean: Tensor,
    /// `[F]` f32; a constant column gets 1, so it maps to zeros instead of dividing by zero.
    std: Tensor,
}

impl Standardizer {
    /// Fits on features `[N, F]` with N >= 1. Statistics are computed in f64: in f32 the mean
    /// of a constant column can miss the value by an ulp, which would leave a tiny variance and
    /// blow the column up instead of zeroing it.
    pub fn fit(features: &Tensor) -> Result<Standardizer> {
        if features.rank() != 2 || features.shape()[0] == 0 {
            return Err(Error::invalid(
                "standardize",
                format!(
                    "fits on features [rows >= 1, features], got shape {:?}",
                    features.shape()
                ),
            ));
        }
        let x = features.detach().to_dtype(DType::F64)?;
        let mean = x.mean_dims(&[0], false)?.to_vec::<f64>()?;
        let var = x.var_dims(&[0], false, false)?.to_vec::<f64>()?;
        let std: Vec<f64> = var
            .iter()
            .zip(&mean)
            .map(|(&v, &m)| {
                let s = v.sqrt();
                // Constant up to rounding (relative to the values' size) counts as constant.
                if s == 0.0 || s <= 1e-12 * m.abs() {
                    1.0
                } else {
                    s
                }
            })
            .collect();
        let f = mean.len();
        Ok(Standardizer {
            mean: Tensor::from_f64s(&mean, &[f], DType::F32)?,
            std: Tensor::from_f64s(&std, &[f], DType::F32)?,
        })
    }

    pub fn fit_dataset(dataset: &Dataset) -> Result<Standardizer> {
        Self::fit(dataset.features())
    }

    pub fn mean(&self) -> &Tensor {
        &self.mean
    }

    pub fn std(&self) -> &Tensor {
        &self.std
    }

    /// `(x - mean) / std` for features `[N, F]` with the fitted F.
    pub fn transform(&self, features: &Tensor) -> Result<Tensor> {
        self.check_width(features)?;
        features
            .to_dtype(DType::F32)?
            .sub(&self.mean)?
            .div(&self.std)
    }

    /// `x * std + mean`, mapping standardized values back to the original units.
    pub fn inverse_transform(&self, features: &Tensor) -> Result<Tensor> {
        self.check_width(features)?;
        features
            .to_dtype(DType::F32)?
            .mul(&self.std)?
            .add(&self.mean)
    }

    /// The same dataset with standardized features; targets and names are kept.
    pub fn transform_dataset(&self, dataset: &Dataset) -> Result<Dataset> {
        dataset.with_features(self.transform(dataset.features())?)
    }

    fn check_width(&self, features: &Tensor) -> Result<()> {
        if features.rank() != 2 || features.shape()[1] != self.mean.shape()[0] {
            return Err(Error::ShapeMismatch {
                op: "standardize (features must be [rows, fitted features])",
                lhs: features.shape().to_vec(),
                rhs: self.mean.shape().to_vec(),
            });
        }
        Ok(())
    }
}

/// Class ids (any shape, integer dtype) to one-hot rows of width `classes`, as
/// `torch.nn.functional.one_hot`: I64, on the ids' device, the output shape the input's with
/// `classes` appended. An id outside `0..classes` is an error naming the first such target.
pub fn one_hot(targets: &Tensor, classes: usize) -> Result<Tensor> {
    if !targets.dtype().is_int() {
        return Err(Error::UnsupportedDType {
            op: "one_hot",
            dtype: targets.dtype(),
            detail: ": class ids must be integers".into(),
        });
    }
    let ids = no_grad(|| targets.to_dtype(DType::I64))?;
    if ids.numel() > 0 {
        let (lo, hi) = (ids.min()?.item()?, ids.max()?.item()?);
        if lo < 0.0 || hi >= classes as f64 {
            let host = ids.to_vec::<i64>()?;
            let (row, c) = host
                .iter()
                .enumerate()
                .find(|(_, &c)| c < 0 || c as u64 >= classes as u64)
                .map_or((0, lo as i64), |(r, &c)| (r, c));
            return Err(Error::invalid(
                "one_hot",
                format!("target {row} is class {c}, outside 0..{classes}"),
            ));
        }
    }
    // Each id against 0..classes: the comparison's shape is the output's, allocated as every
    // op's output is (an error, not an abort, when it does not fit).
    let all = Tensor::arange(0.0, classes as f64, 1.0, DType::I64)?.to_device(ids.device())?;
    no_grad(|| ids.unsqueeze(-1)?.eq(&all)?.to_dtype(DType::I64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    fn matrix(rows: &[[f32; 2]]) -> Tensor {
        let v: Vec<f32> = rows.iter().flatten().copied().collect();
        Tensor::from_vec(v, &[rows.len(), 2]).unwrap()
    }

    #[test]
    fn transform_gives_zero_mean_and_unit_variance_on_the_fit_data() {
        let x = matrix(&[[1.0, 10.0], [2.0, 20.0], [3.0, 60.0], [6.0, 30.0]]);
        let s = Standardizer::fit(&x).unwrap();
        let z = s.transform(&x).unwrap();
        let mean = z.mean_dims(&[0], false).unwrap().to_vec::<f32>().unwrap();
        let var = z
            .var_dims(&[0], false, false)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        for j in 0..2 {
            assert!(mean[j].abs() < 1e-6, "{mean:?}");
            assert!((var[j] - 1.0).abs() < 1e-5, "{var:?}");
        }
        assert_eq!(s.mean().to_vec::<f32>().unwrap(), vec![3.0, 30.0]);
    }

    #[test]
    fn a_constant_column_maps_to_zeros_not_to_nan() {
        let x = matrix(&[[0.1, 1.0], [0.1, 2.0], [0.1, 3.0]]);
        let s = Standardizer::fit(&x).unwrap();
        assert_eq!(s.std().to_vec::<f32>().unwrap()[0], 1.0);
        let z = s.transform(&x).unwrap().to_vec::<f32>().unwrap();
        assert_eq!([z[0], z[2], z[4]], [0.0, 0.0, 0.0]);
    }

    #[test]
    fn statistics_fitted_on_train_apply_unchanged_to_test() {
        let train = matrix(&[[0.0, 0.0], [2.0, 4.0]]);
        let test = matrix(&[[4.0, 8.0]]);
        let s = Standardizer::fit(&train).unwrap();
        // mean (1, 2), std (1, 2): the test row maps to (3, 3).
        assert_eq!(
            s.transform(&test).unwrap().to_vec::<f32>().unwrap(),
            [3.0, 3.0]
        );
        let back = s.inverse_transform(&s.transform(&test).unwrap()).unwrap();
        assert_eq!(back.to_vec::<f32>().unwrap(), [4.0, 8.0]);
    }

    #[test]
    fn transform_rejects_another_feature_width() {
        let s = Standardizer::fit(&matrix(&[[1.0, 2.0]])).unwrap();
        let x = Tensor::zeros(&[2, 3], DType::F32, Device::Cpu).unwrap();
        assert!(s.transform(&x).is_err());
        let empty = Tensor::zeros(&[0, 2], DType::F32, Device::Cpu).unwrap();
        assert!(Standardizer::fit(&empty).is_err());
    }

    #[test]
    fn one_hot_sets_one_column_per_row() {
        let y = Tensor::from_vec(vec![2i64, 0, 1], &[3]).unwrap();
        let h = one_hot(&y, 3).unwrap();
        assert_eq!(h.shape(), &[3, 3]);
        assert_eq!(h.dtype(), DType::I64, "as PyTorch's one_hot");
        assert_eq!(h.to_vec::<i64>().unwrap(), [0, 0, 1, 1, 0, 0, 0, 1, 0]);
    }

    #[test]
    fn one_hot_names_the_out_of_range_class() {
        let y = Tensor::from_vec(vec![0i64, 3], &[2]).unwrap();
        let err = one_hot(&y, 3).unwrap_err().to_string();
        assert!(err.contains("class 3") && err.contains("0..3"), "{err}");
        let neg = Tensor::from_vec(vec![-1i64], &[1]).unwrap();
        assert!(one_hot(&neg, 3).is_err());
        let f = Tensor::from_vec(vec![0.0f32], &[1]).unwrap();
        assert!(one_hot(&f, 3).is_err());
    }
}
