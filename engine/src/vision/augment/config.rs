//! The augmentation hyperparameters, named and defaulted as in ultralytics' `cfg/default.yaml`
//! (8.4.190).

use crate::{Error, Result};

/// What ultralytics' `v8_transforms` does to a training image, and how strongly.
///
/// MixUp, CutMix and copy-paste are not implemented (their defaults are 0, i.e. off), nor is a
/// non-zero `perspective` (`warpPerspective`); `validate` rejects the latter.
#[derive(Clone, Debug, PartialEq)]
pub struct AugmentConfig {
    /// The side of the square training image (`imgsz`).
    pub imgsz: usize,
    /// Probability of a 4-image mosaic (`mosaic`).
    pub mosaic: f64,
    /// Rotation range in degrees, ± (`degrees`).
    pub degrees: f64,
    /// Translation range as a fraction of `imgsz`, ± (`translate`).
    pub translate: f64,
    /// Scale gain range: the scale is drawn from `[1 - scale, 1 + scale]` (`scale`).
    pub scale: f64,
    /// Shear range in degrees, ± (`shear`).
    pub shear: f64,
    /// Perspective distortion; only 0 is supported (`perspective`).
    pub perspective: f64,
    /// Hue gain, a fraction of the hue circle (`hsv_h`).
    pub hsv_h: f64,
    /// Saturation gain (`hsv_s`).
    pub hsv_s: f64,
    /// Value (brightness) gain (`hsv_v`).
    pub hsv_v: f64,
    /// Probability of a vertical flip (`flipud`).
    pub flipud: f64,
    /// Probability of a horizontal flip (`fliplr`).
    pub fliplr: f64,
}

impl Default for AugmentConfig {
    fn default() -> Self {
        AugmentConfig {
            imgsz: 640,
            mosaic: 1.0,
            degrees: 0.0,
            translate: 0.1,
            scale: 0.5,
            shear: 0.0,
            perspective: 0.0,
            hsv_h: 0.015,
            hsv_s: 0.7,
            hsv_v: 0.4,
            flipud: 0.0,
            fliplr: 0.5,
        }
    }
}

impl AugmentConfig {
    /// The settings with everything random switched off (no mosaic, identity affine, no colour
    /// change, no flips): what a pipeline test or a debugging run wants.
    pub fn none(imgsz: usize) -> Self {
        AugmentConfig {
            imgsz,
            mosaic: 0.0,
            translate: 0.0,
            scale: 0.0,
            hsv_h: 0.0,
            hsv_s: 0.0,
            hsv_v: 0.0,
            fliplr: 0.0,
            ..Default::default()
        }
    }

    /// Checks every value is in its range, naming the first that is not.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &str, value: f64, range: &str| {
            Err(Error::invalid(
                "augment config",
                format!("{name} = {value} is outside {range}"),
            ))
        };
        if self.imgsz < 2 {
            return Err(Error::invalid(
                "augment config",
                format!("imgsz = {} must be at least 2", self.imgsz),
            ));
        }
        for (name, p) in [
            ("mosaic", self.mosaic),
            ("flipud", self.flipud),
            ("fliplr", self.fliplr),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return bad(name, p, "[0, 1]");
            }
        }
        for (name, g) in [
            ("hsv_h", self.hsv_h),
            ("hsv_s", self.hsv_s),
            ("hsv_v", self.hsv_v),
            ("translate", self.translate),
        ] {
            if !(0.0..=1.0).contains(&g) {
                return bad(name, g, "[0, 1]");
            }
        }
        if !(0.0..1.0).contains(&self.scale) {
            return bad("scale", self.scale, "[0, 1)");
        }
        if !(0.0..=180.0).contains(&self.degrees) {
            return bad("degrees", self.degrees, "[0, 180]");
        }
        if !(0.0..90.0).contains(&self.shear) {
            return bad("shear", self.shear, "[0, 90)");
        }
        if self.perspective != 0.0 {
            return Err(Error::invalid(
                "augment config",
                format!(
                    "perspective = {} is not supported (only the affine warp, perspective = 0)",
                    self.perspective
                ),
            ));
        }
        Ok(())
    }
}
