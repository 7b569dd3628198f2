//! An in-memory supervised dataset: a feature matrix, one target per row, and the names that
//! make results readable. Selecting rows (shuffles, splits, subsets) builds new tensors through
//! `index_select`, so every derived dataset is independent of the one it came from.

use crate::{DType, Device, Error, Generator, Result, Tensor};
use std::collections::BTreeMap;

/// Rows of features `[N, F]` (f32) with targets `[N]`: i64 class ids for classification, f32
/// values for regression. The fields are private so the shape invariants hold for its life.
#[derive(Clone, Debug)]
pub struct Dataset {
    features: Tensor,
    targets: Tensor,
    class_names: Option<Vec<String>>,
    feature_names: Vec<String>,
}

impl Dataset {
    /// Checks that `features` is `[N, F]` and `targets` is `[N]`. Float features become f32;
    /// integer or bool targets become i64 class ids (which must not be negative), float targets
    /// become f32 regression values. Features are named `x0`, `x1`, ... until renamed.
    pub fn new(features: Tensor, targets: Tensor) -> Result<Dataset> {
        if features.rank() != 2 {
            return Err(Error::invalid(
                "dataset",
                format!(
                    "features must be [rows, features], got shape {:?}",
                    features.shape()
                ),
            ));
        }
        if targets.rank() != 1 || targets.shape()[0] != features.shape()[0] {
            return Err(Error::ShapeMismatch {
                op: "dataset (targets must be [rows])",
                lhs: features.shape().to_vec(),
                rhs: targets.shape().to_vec(),
            });
        }
        let features = features.to(Device::Cpu, DType::F32)?;
        let targets = if targets.dtype().is_float() {
            targets.to(Device::Cpu, DType::F32)?
        } else {
            let t = targets.to(Device::Cpu, DType::I64)?;
            if let Some(&bad) = t.to_vec::<i64>()?.iter().find(|&&c| c < 0) {
                return Err(Error::invalid(
                    "dataset",
                    format!("class ids must not be negative, found {bad}"),
                ));
            }
            t
        };
        let feature_names = (0..features.shape()[1]).map(|i| format!("x{i}")).collect();
        Ok(Dataset {
            features,
            targets,
            class_names: None,
            feature_names,
        })
    }

    /// Like `new`, for features `[N, ...]` of any rank >= 1 (images, say), flattened to
    /// `[N, product of the rest]`.
    pub fn flattened(features: Tensor, targets: Tensor) -> Result<Dataset> {
        let Some((&rows, rest)) = features.shape().split_first() else {
            return Err(Error::invalid(
                "dataset",
                "features must have a row dimension, got a scalar",
            ));
        };
        let width = rest
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| Error::invalid("dataset", "feature width overflows"))?;
        Dataset::new(features.reshape_to(&[rows, width])?, targets)
    }

    /// Names the classes; every class id must index into `names`.
    pub fn with_class_names(mut self, names: Vec<String>) -> Result<Dataset> {
        if !self.is_classification() {
            return Err(Error::invalid(
                "dataset",
                "class names need i64 class-id targets, but the targets are regression values",
            ));
        }
        if let Some(max) = self.targets.to_vec::<i64>()?.into_iter().max() {
            if max as usize >= names.len() {
                return Err(Error::invalid(
                    "dataset",
                    format!(
                        "class id {max} has no name among {} class names",
                        names.len()
                    ),
                ));
            }
        }
        self.class_names = Some(names);
        Ok(self)
    }

    /// Names the feature columns; one name per column.
    pub fn with_feature_names(mut self, names: Vec<String>) -> Result<Dataset> {
        if names.len() != self.num_features() {
            return Err(Error::invalid(
                "dataset",
                format!(
                    "{} feature names for {} feature columns",
                    names.len(),
                    self.num_features()
                ),
            ));
        }
        self.feature_names = names;
        Ok(self)
    }

    /// The same rows, targets and names over transformed features of the same shape.
    pub fn with_features(&self, features: Tensor) -> Result<Dataset> {
        if features.shape() != self.features.shape() {
            return Err(Error::ShapeMismatch {
                op: "dataset (replacement features)",
                lhs: self.features.shape().to_vec(),
                rhs: features.shape().to_vec(),
            });
        }
        Ok(Dataset {
            features: features.to(Device::Cpu, DType::F32)?,
            ..self.clone()
        })
    }

    pub fn features(&self) -> &Tensor {
        &self.features
    }

    pub fn targets(&self) -> &Tensor {
        &self.targets
    }

    pub fn class_names(&self) -> Option<&[String]> {
        self.class_names.as_deref()
    }

    pub fn feature_names(&self) -> &[String] {
        &self.feature_names
    }

    pub fn len(&self) -> usize {
        self.features.shape()[0]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn num_features(&self) -> usize {
        self.features.shape()[1]
    }

    /// True when the targets are class ids rather than regression values.
    pub fn is_classification(&self) -> bool {
        self.targets.dtype() == DType::I64
    }

    /// The number of classes: the names' count when named, else the largest id plus one.
    pub fn num_classes(&self) -> Result<Option<usize>> {
        if !self.is_classification() {
            return Ok(None);
        }
        if let Some(names) = &self.class_names {
            return Ok(Some(names.len()));
        }
        let max = self.targets.to_vec::<i64>()?.into_iter().max();
        Ok(Some(max.map_or(0, |m| m as usize + 1)))
    }

    /// The rows at `indices`, in that order (repeats allowed); names carry over.
    pub fn subset(&self, indices: &[usize]) -> Result<Dataset> {
        let idx: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
        let idx = Tensor::from_vec(idx, &[indices.len()])?;
        Ok(Dataset {
            features: self.features.index_select(0, &idx)?,
            targets: self.targets.index_select(0, &idx)?,
            class_names: self.class_names.clone(),
            feature_names: self.feature_names.clone(),
        })
    }

    /// The rows in a seeded random order. Returns a new dataset, because tensors are shared
    /// handles and other holders of this one should keep seeing the original order.
    pub fn shuffle(&self, gen: &mut Generator) -> Result<Dataset> {
        self.subset(&gen.permutation(self.len()))
    }

    /// A seeded random split into `(train, test)`, with `floor(fraction * len)` rows in train,
    /// as scikit-learn's `train_test_split(train_size=fraction)` counts them.
    pub fn split(&self, fraction: f64, gen: &mut Generator) -> Result<(Dataset, Dataset)> {
        let order = gen.permutation(self.len());
        let n_train = train_count("split", fraction, self.len())?;
        Ok((
            self.subset(&order[..n_train])?,
            self.subset(&order[n_train..])?,
        ))
    }

    /// A seeded split that keeps each class's proportion, sized as scikit-learn's stratified
    /// `train_test_split`: `floor(fraction * len)` rows go to train (iris' 150 at 0.75 gives
    /// 112/38), each class gets the floor of its share of them, and the rows left over go to the
    /// classes with the largest remainders (ties in a seeded random order). Rows stay in a
    /// random order, not grouped by class, so batches drawn in order still mix classes.
    pub fn stratified_split(
        &self,
        fraction: f64,
        gen: &mut Generator,
    ) -> Result<(Dataset, Dataset)> {
        if !self.is_classification() {
            return Err(Error::invalid(
                "stratified_split",
                "needs class-id targets; these targets are regression values",
            ));
        }
        train_count("stratified_split", fraction, 0)?;
        let classes = self.targets.to_vec::<i64>()?;
        let order = gen.permutation(self.len());
        let mut per_class: BTreeMap<i64, usize> = BTreeMap::new();
        for &c in &classes {
            *per_class.entry(c).or_default() += 1;
        }
        let mut quota = class_quotas(
            &per_class,
            train_count("stratified_split", fraction, self.len())?,
            gen,
        );
        let (mut train, mut test) = (Vec::new(), Vec::new());
        for i in order {
            match quota.get_mut(&classes[i]) {
                Some(q) if *q > 0 => {
                    *q -= 1;
                    train.push(i);
                }
                _ => test.push(i),
            }
        }
        Ok((self.subset(&train)?, self.subset(&test)?))
    }
}

/// How many of `n_train` rows each class gets: the floor of its share, then one more for the
/// classes with the largest remainders until `n_train` is reached (scikit-learn's
/// `_approximate_mode`), ties broken in a seeded random order.
fn class_quotas(
    per_class: &BTreeMap<i64, usize>,
    n_train: usize,
    gen: &mut Generator,
) -> BTreeMap<i64, usize> {
    let total: usize = per_class.values().sum();
    if total == 0 {
        return BTreeMap::new();
    }
    // Shares as exact fractions of `total`: floor and remainder in integers.
    let mut quota: BTreeMap<i64, usize> = BTreeMap::new();
    let mut remainders: Vec<(usize, usize, i64)> = Vec::new();
    let tie_order = gen.permutation(per_class.len());
    for (k, (&c, &n)) in per_class.iter().enumerate() {
        let share = n_train * n;
        quota.insert(c, share / total);
        remainders.push((share % total, tie_order[k], c));
    }
    let mut left = n_train - quota.values().sum::<usize>();
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, _, c) in remainders {
        if left == 0 {
            break;
        }
        let (q, n) = (quota[&c], per_class[&c]);
        if q < n {
            quota.insert(c, q + 1);
            left -= 1;
        }
    }
    quota
}

/// The train share of `n` rows, after checking that `fraction` is a proportion.
fn train_count(op: &'static str, fraction: f64, n: usize) -> Result<usize> {
    if !(0.0..=1.0).contains(&fraction) {
        return Err(Error::invalid(
            op,
            format!("the train fraction must lie in [0, 1], got {fraction}"),
        ));
    }
    Ok(((fraction * n as f64).floor() as usize).min(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row i has features [i, 10 i] and class i % classes.
    fn toy(n: usize, classes: i64) -> Dataset {
        let x: Vec<f32> = (0..n).flat_map(|i| [i as f32, 10.0 * i as f32]).collect();
        let y: Vec<i64> = (0..n as i64).map(|i| i % classes).collect();
        Dataset::new(
            Tensor::from_vec(x, &[n, 2]).unwrap(),
            Tensor::from_vec(y, &[n]).unwrap(),
        )
        .unwrap()
    }

    fn row_ids(d: &Dataset) -> Vec<usize> {
        let x = d.features().to_vec::<f32>().unwrap();
        x.chunks(2).map(|r| r[0] as usize).collect()
    }

    #[test]
    fn new_rejects_targets_of_another_length() {
        let x = Tensor::zeros(&[3, 2], DType::F32, Device::Cpu).unwrap();
        let y = Tensor::zeros(&[4], DType::I64, Device::Cpu).unwrap();
        assert!(Dataset::new(x.clone(), y).is_err());
        let y2 = Tensor::zeros(&[3, 1], DType::I64, Device::Cpu).unwrap();
        assert!(Dataset::new(x, y2).is_err());
    }

    #[test]
    fn new_rejects_features_that_are_not_a_matrix() {
        let x = Tensor::zeros(&[3], DType::F32, Device::Cpu).unwrap();
        let y = Tensor::zeros(&[3], DType::I64, Device::Cpu).unwrap();
        assert!(Dataset::new(x, y).is_err());
    }

    #[test]
    fn new_rejects_negative_class_ids() {
        let x = Tensor::zeros(&[2, 1], DType::F32, Device::Cpu).unwrap();
        let y = Tensor::from_vec(vec![0i64, -1], &[2]).unwrap();
        assert!(Dataset::new(x, y).is_err());
    }

    #[test]
    fn integer_targets_are_classes_and_float_targets_are_regression() {
        assert!(toy(4, 2).is_classification());
        let x = Tensor::zeros(&[2, 1], DType::F64, Device::Cpu).unwrap();
        let y = Tensor::from_vec(vec![0.5f64, 1.5], &[2]).unwrap();
        let d = Dataset::new(x, y).unwrap();
        assert!(!d.is_classification());
        assert_eq!(d.features().dtype(), DType::F32);
        assert_eq!(d.targets().dtype(), DType::F32);
        assert_eq!(d.num_classes().unwrap(), None);
    }

    #[test]
    fn class_names_must_cover_every_class_id() {
        assert!(toy(6, 3)
            .with_class_names(vec!["a".into(), "b".into()])
            .is_err());
        let d = toy(6, 3)
            .with_class_names(vec!["a".into(), "b".into(), "c".into()])
            .unwrap();
        assert_eq!(d.num_classes().unwrap(), Some(3));
    }

    #[test]
    fn shuffle_is_a_seeded_permutation_of_the_rows() {
        let d = toy(20, 3);
        let a = row_ids(&d.shuffle(&mut Generator::new(5)).unwrap());
        let b = row_ids(&d.shuffle(&mut Generator::new(5)).unwrap());
        assert_eq!(a, b);
        assert_ne!(a, (0..20).collect::<Vec<_>>());
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>());
        let s = d.shuffle(&mut Generator::new(5)).unwrap();
        let y = s.targets().to_vec::<i64>().unwrap();
        assert!(a.iter().zip(&y).all(|(&i, &c)| c == i as i64 % 3));
    }

    #[test]
    fn split_partitions_the_rows_by_fraction() {
        let d = toy(10, 2);
        let (train, test) = d.split(0.7, &mut Generator::new(1)).unwrap();
        assert_eq!((train.len(), test.len()), (7, 3));
        let mut all = row_ids(&train);
        all.extend(row_ids(&test));
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert!(d.split(1.5, &mut Generator::new(1)).is_err());
        assert!(d.split(f64::NAN, &mut Generator::new(1)).is_err());
    }

    #[test]
    fn stratified_split_keeps_each_class_proportion() {
        // 30 rows of class 0 and 10 rows of class 1.
        let x = Tensor::zeros(&[40, 1], DType::F32, Device::Cpu).unwrap();
        let y: Vec<i64> = (0..40).map(|i| (i >= 30) as i64).collect();
        let d = Dataset::new(x, Tensor::from_vec(y, &[40]).unwrap()).unwrap();
        let (train, test) = d.stratified_split(0.8, &mut Generator::new(2)).unwrap();
        let count = |d: &Dataset, c: i64| {
            d.targets()
                .to_vec::<i64>()
                .unwrap()
                .iter()
                .filter(|&&t| t == c)
                .count()
        };
        assert_eq!((count(&train, 0), count(&train, 1)), (24, 8));
        assert_eq!((count(&test, 0), count(&test, 1)), (6, 2));
        // Train rows are mixed, not grouped by class.
        let t = train.targets().to_vec::<i64>().unwrap();
        assert_ne!(t[..8], [1; 8]);
        assert_ne!(t[24..], [1; 8]);
    }

    #[test]
    fn stratified_split_sizes_iris_as_scikit_learn_does() {
        // 150 rows, 50 per class, train fraction 0.75: 112 train and 38 test, 37 or 38 a class.
        let d = toy(150, 3);
        let (train, test) = d.stratified_split(0.75, &mut Generator::new(0)).unwrap();
        assert_eq!((train.len(), test.len()), (112, 38));
        let mut per_class = [0; 3];
        for c in train.targets().to_vec::<i64>().unwrap() {
            per_class[c as usize] += 1;
        }
        per_class.sort();
        assert_eq!(per_class, [37, 37, 38]);
    }

    #[test]
    fn stratified_split_refuses_regression_targets() {
        let x = Tensor::zeros(&[2, 1], DType::F32, Device::Cpu).unwrap();
        let y = Tensor::from_vec(vec![0.5f32, 1.5], &[2]).unwrap();
        let d = Dataset::new(x, y).unwrap();
        assert!(d.stratified_split(0.5, &mut Generator::new(0)).is_err());
    }

    #[test]
    fn subset_picks_rows_in_order_and_checks_bounds() {
        let d = toy(5, 2)
            .with_feature_names(vec!["a".into(), "b".into()])
            .unwrap();
        let s = d.subset(&[4, 0, 4]).unwrap();
        assert_eq!(row_ids(&s), vec![4, 0, 4]);
        assert_eq!(s.targets().to_vec::<i64>().unwrap(), vec![0, 0, 0]);
        assert_eq!(s.feature_names(), ["a", "b"]);
        assert!(d.subset(&[5]).is_err());
        assert_eq!(d.subset(&[]).unwrap().len(), 0);
    }
}
