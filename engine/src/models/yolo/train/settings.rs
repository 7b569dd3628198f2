//! The settings of a YOLO training run, named and defaulted as ultralytics' `cfg/default.yaml`
//! (8.4.190) names them, so a checkpoint's header and a `.pt`'s `train_args` read the same.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainSettings {
    /// The dataset's `data.yaml`.
    pub data: PathBuf,
    pub epochs: usize,
    /// Images per batch (capped at the training set's size).
    pub batch: usize,
    /// The side of the square training images; rounded up to a multiple of the largest stride.
    pub imgsz: usize,
    /// `auto`, `SGD` or `AdamW`.
    pub optimizer: String,
    pub lr0: f64,
    pub lrf: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    pub warmup_epochs: f64,
    pub warmup_momentum: f64,
    pub warmup_bias_lr: f64,
    /// Epochs at the end trained without mosaic.
    pub close_mosaic: usize,
    /// Nominal batch size: gradients accumulate up to about this many images per step.
    pub nbs: usize,
    pub seed: u64,
    /// Data loader threads (0: one per core, at most 8).
    pub workers: usize,
    /// BF16 mixed precision on CUDA (the CPU computes in F32 either way).
    pub amp: bool,
    /// Mosaic probability (1.0 as ultralytics; 0 turns it off).
    pub mosaic: f64,
    /// Where `last`/`best` checkpoints and results.csv go.
    pub save_dir: PathBuf,
}

impl Default for TrainSettings {
    fn default() -> Self {
        TrainSettings {
            data: PathBuf::new(),
            epochs: 100,
            batch: 16,
            imgsz: 640,
            optimizer: "auto".into(),
            lr0: 0.01,
            lrf: 0.01,
            momentum: 0.937,
            weight_decay: 0.0005,
            warmup_epochs: 3.0,
            warmup_momentum: 0.8,
            warmup_bias_lr: 0.1,
            close_mosaic: 10,
            nbs: 64,
            seed: 0,
            workers: 0,
            amp: true,
            mosaic: 1.0,
            save_dir: PathBuf::from("runs/train"),
        }
    }
}

impl TrainSettings {
    /// Refuses settings no run can train with, naming the setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::invalid("yolo train settings", msg));
        if self.data.as_os_str().is_empty() {
            return bad("`data` (the dataset's data.yaml) is required".into());
        }
        for (name, v) in [
            ("epochs", self.epochs),
            ("batch", self.batch),
            ("imgsz", self.imgsz),
            ("nbs", self.nbs),
        ] {
            if v == 0 {
                return bad(format!("`{name}` must be positive"));
            }
        }
        for (name, v) in [
            ("lr0", self.lr0),
            ("lrf", self.lrf),
            ("momentum", self.momentum),
            ("weight_decay", self.weight_decay),
            ("warmup_epochs", self.warmup_epochs),
            ("warmup_momentum", self.warmup_momentum),
            ("warmup_bias_lr", self.warmup_bias_lr),
            ("mosaic", self.mosaic),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(format!("`{name}` must be a finite number >= 0, got {v}"));
            }
        }
        Ok(())
    }

    /// ultralytics' `train_args` for a `.pt` checkpoint.
    pub fn train_args(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut args = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        args.insert("task".into(), "detect".into());
        args.insert("mode".into(), "train".into());
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_data() -> TrainSettings {
        TrainSettings {
            data: "shapes/data.yaml".into(),
            ..TrainSettings::default()
        }
    }

    #[test]
    fn defaults_are_ultralytics_and_need_only_data() {
        assert!(TrainSettings::default().validate().is_err());
        let s = with_data();
        s.validate().unwrap();
        assert_eq!(
            (s.epochs, s.batch, s.imgsz, s.nbs, s.close_mosaic),
            (100, 16, 640, 64, 10)
        );
        assert_eq!(
            (s.lr0, s.lrf, s.momentum, s.weight_decay),
            (0.01, 0.01, 0.937, 0.0005)
        );
    }

    #[test]
    fn impossible_settings_are_refused_naming_the_setting() {
        let zero = TrainSettings {
            epochs: 0,
            ..with_data()
        };
        assert!(zero
            .validate()
            .unwrap_err()
            .to_string()
            .contains("`epochs`"));
        let negative = TrainSettings {
            lr0: -1.0,
            ..with_data()
        };
        assert!(negative
            .validate()
            .unwrap_err()
            .to_string()
            .contains("`lr0`"));
    }

    #[test]
    fn train_args_carry_the_settings_and_the_task() {
        let args = with_data().train_args();
        assert_eq!(args["task"], "detect");
        assert_eq!(args["imgsz"], 640);
        assert_eq!(args["data"], "shapes/data.yaml");
    }
}
