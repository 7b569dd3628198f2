//! ultralytics' three optimizer parameter groups (`BaseTrainer.build_optimizer`), in its order:
//!
//! - pg0: weights that decay (convolution and linear weights), at the scaled weight decay;
//! - pg1: weights of normalization layers, no decay;
//! - pg2: biases (any name containing "bias"), no decay.
//!
//! ultralytics tests the module's type (a torch.nn `*Norm*` class); the engine has no module
//! types to ask, so a parameter belongs to a norm when its module is named `bn`: ultralytics'
//! `Conv` names its BatchNorm2d that, and the YOLOv8/YOLO11 definitions have no other norm.
//! ultralytics also lists the frozen DFL bins (`dfl.conv.weight`) in pg0 but never updates them;
//! the engine keeps them as a buffer, so they are in no group.

use crate::models::yolo::YoloModel;
use crate::nn::Module;
use crate::{Error, Result, Tensor};

/// A model's trainable parameters by group, each `(name, tensor)` in model order.
#[derive(Clone, Debug, Default)]
pub struct ParamGroups {
    /// pg0: decayed weights.
    pub weights: Vec<(String, Tensor)>,
    /// pg1: normalization weights.
    pub norm_weights: Vec<(String, Tensor)>,
    /// pg2: biases.
    pub biases: Vec<(String, Tensor)>,
}

/// Which group a parameter joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupKind {
    Weight,
    NormWeight,
    Bias,
}

impl GroupKind {
    /// ultralytics' rule, in its order: a bias by name first, then norm weights (and CLIP-style
    /// `logit_scale`), else a decayed weight.
    pub fn of(name: &str) -> GroupKind {
        let owner = name.rsplit_once('.').map(|(m, _)| m).unwrap_or("");
        let owner_is_norm = owner == "bn" || owner.ends_with(".bn");
        if name.contains("bias") {
            GroupKind::Bias
        } else if owner_is_norm || name.contains("logit_scale") {
            GroupKind::NormWeight
        } else {
            GroupKind::Weight
        }
    }
}

impl ParamGroups {
    /// Splits a YOLO model's parameters.
    pub fn of_model(model: &YoloModel) -> Result<ParamGroups> {
        Self::from_named(model.named_parameters())
    }

    /// Splits named parameters (a module's `named_parameters()`).
    pub fn from_named(params: Vec<(String, Tensor)>) -> Result<ParamGroups> {
        if params.is_empty() {
            return Err(Error::invalid(
                "yolo param groups",
                "the model has no parameters",
            ));
        }
        let mut groups = ParamGroups::default();
        for (name, t) in params {
            match GroupKind::of(&name) {
                GroupKind::Weight => groups.weights.push((name, t)),
                GroupKind::NormWeight => groups.norm_weights.push((name, t)),
                GroupKind::Bias => groups.biases.push((name, t)),
            }
        }
        Ok(groups)
    }

    /// (pg0, pg1, pg2) sizes, as ultralytics logs them.
    pub fn counts(&self) -> [usize; 3] {
        [
            self.weights.len(),
            self.norm_weights.len(),
            self.biases.len(),
        ]
    }
}

/// ultralytics scales the weight decay with the batch actually summed per step:
/// `weight_decay * batch_size * accumulate / nbs`.
pub fn scaled_weight_decay(
    weight_decay: f64,
    batch_size: usize,
    accumulate: usize,
    nbs: usize,
) -> f64 {
    weight_decay * batch_size as f64 * accumulate as f64 / nbs as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::yolo::YoloConfig;
    use crate::Generator;
    use std::path::PathBuf;

    /// The group names ultralytics builds for `model` (nc 80), from
    /// tests/fixtures/yolo_train/make_param_groups.py.
    fn reference(model: &str) -> [Vec<String>; 3] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/yolo_train/param_groups.json");
        let text = std::fs::read_to_string(path).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let names = |g: &str| -> Vec<String> {
            v[model][g]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string())
                // A buffer in the engine (see the module comment).
                .filter(|n| !n.ends_with("dfl.conv.weight"))
                .collect()
        };
        [names("weight"), names("norm"), names("bias")]
    }

    fn groups_of(model: &str) -> ParamGroups {
        let cfg = YoloConfig::from_file(std::path::Path::new(model), Some(80)).unwrap();
        let m = YoloModel::build(&cfg, vec![], false, &mut Generator::new(0)).unwrap();
        ParamGroups::of_model(&m).unwrap()
    }

    fn names(g: &[(String, Tensor)]) -> Vec<String> {
        g.iter().map(|(n, _)| n.clone()).collect()
    }

    #[test]
    fn yolo11n_groups_match_ultralytics() {
        // ultralytics logs 81 weight(decay=0.0), 88 weight(decay), 87 bias; the 88 include the
        // frozen dfl.conv.weight.
        let g = groups_of("yolo11n.yaml");
        assert_eq!(g.counts(), [87, 81, 87]);
        let [w, n, b] = reference("yolo11n.yaml");
        assert_eq!(names(&g.weights), w);
        assert_eq!(names(&g.norm_weights), n);
        assert_eq!(names(&g.biases), b);
    }

    #[test]
    fn yolov8n_groups_match_ultralytics() {
        // ultralytics: 57 norm weights, 64 decayed weights (with dfl), 63 biases.
        let g = groups_of("yolov8n.yaml");
        assert_eq!(g.counts(), [63, 57, 63]);
        let [w, n, b] = reference("yolov8n.yaml");
        assert_eq!(names(&g.weights), w);
        assert_eq!(names(&g.norm_weights), n);
        assert_eq!(names(&g.biases), b);
    }

    #[test]
    fn weight_decay_scales_with_the_summed_batch() {
        // 0.0005 * 16 * 4 / 64 = 0.0005; batch 24, accumulate 3: 0.0005 * 72 / 64 = 0.0005625.
        assert_eq!(scaled_weight_decay(0.0005, 16, 4, 64), 0.0005);
        assert!((scaled_weight_decay(0.0005, 24, 3, 64) - 0.0005625).abs() < 1e-18);
    }

    #[test]
    fn no_parameters_is_an_error() {
        assert!(ParamGroups::from_named(vec![]).is_err());
    }
}
