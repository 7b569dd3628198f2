//! Every random choice of one training sample, drawn up front into plain values.
//!
//! The transforms take these values and draw nothing themselves, so a sample is a pure function
//! of (image files, draws). The draws of sample `index` in epoch `epoch` come from a Philox
//! stream keyed by `(seed, epoch, index)` alone, never from a generator shared across samples:
//! the same seed gives the same sample on every run, whichever worker thread makes it and in
//! whatever order. ultralytics draws the same quantities from Python's `random` and numpy's
//! global generators, in a different order and with different bits, so runs match it in
//! distribution, and exactly when its draws are replayed (the parity fixtures do this).

use super::config::AugmentConfig;
use crate::{Generator, Result};

/// Where the 4-image mosaic puts its centre, and which images join the sample's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MosaicDraw {
    /// The centre (xc, yc) in the `2 * imgsz` canvas: ultralytics' `int(random.uniform(s / 2,
    /// 3 * s / 2))`, each in `[ceil(s / 2), 2 * s - ceil(s / 2))`.
    pub center: (usize, usize),
    /// Dataset indices of the top-right, bottom-left and bottom-right images.
    pub others: [usize; 3],
}

/// The random affine's parameters (ultralytics' `RandomPerspective` without perspective).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AffineDraw {
    /// Rotation in degrees, counter-clockwise as `cv2.getRotationMatrix2D`.
    pub degrees: f64,
    /// Scale factor.
    pub scale: f64,
    /// Shear along x and y, in degrees.
    pub shear: (f64, f64),
    /// Where the image centre lands, as a fraction of the output width and height (0.5 is
    /// centred).
    pub translate: (f64, f64),
}

impl AffineDraw {
    /// No rotation, scale 1, no shear, centred.
    pub const IDENTITY: AffineDraw = AffineDraw {
        degrees: 0.0,
        scale: 1.0,
        shear: (0.0, 0.0),
        translate: (0.5, 0.5),
    };
}

/// Where a mosaic's three other images are drawn from.
#[derive(Clone, Copy, Debug)]
pub enum Partners<'a> {
    /// Any of the dataset's `n` images (ultralytics with `cache="ram"`).
    Any(usize),
    /// These dataset indices, e.g. the images loaded last (ultralytics' buffer otherwise).
    Among(&'a [usize]),
}

impl Partners<'_> {
    fn len(&self) -> usize {
        match self {
            Partners::Any(n) => *n,
            Partners::Among(c) => c.len(),
        }
    }

    fn get(&self, k: usize) -> usize {
        match self {
            Partners::Any(_) => k,
            Partners::Among(c) => c[k],
        }
    }
}

/// All draws of one sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleDraws {
    /// `None`: this sample is not a mosaic (mosaic off, closed, or its probability said no).
    pub mosaic: Option<MosaicDraw>,
    pub affine: AffineDraw,
    /// Hue, saturation and value gains, each `uniform(-1, 1) * hsv_{h,s,v}`.
    pub hsv_gains: [f64; 3],
    pub flip_ud: bool,
    pub flip_lr: bool,
}

impl SampleDraws {
    /// Draws one sample's choices, the mosaic's other images among `partners`.
    /// `mosaic_enabled` false (mosaic closed) skips the mosaic whatever `config.mosaic` says.
    pub fn draw(
        config: &AugmentConfig,
        mosaic_enabled: bool,
        partners: Partners,
        rng: &mut Generator,
    ) -> Result<SampleDraws> {
        config.validate()?;
        let mut uniform = |lo: f64, hi: f64| lo + (hi - lo) * rng.uniform(1)[0];
        let use_mosaic = mosaic_enabled && partners.len() > 0 && uniform(0.0, 1.0) < config.mosaic;
        let mosaic = if use_mosaic {
            let s = config.imgsz;
            // ultralytics' border is -s // 2 (floor), so the range is [ceil(s/2), 2s - ceil(s/2)).
            let lo = s.div_ceil(2);
            let hi = 2 * s - lo;
            let pick = |u: f64, n: usize| ((u * n as f64) as usize).min(n - 1);
            let xc = lo + pick(uniform(0.0, 1.0), hi - lo);
            let yc = lo + pick(uniform(0.0, 1.0), hi - lo);
            let others = [0; 3].map(|_| partners.get(pick(uniform(0.0, 1.0), partners.len())));
            Some(MosaicDraw {
                center: (xc, yc),
                others,
            })
        } else {
            None
        };
        let affine = AffineDraw {
            degrees: uniform(-config.degrees, config.degrees),
            scale: uniform(1.0 - config.scale, 1.0 + config.scale),
            shear: (
                uniform(-config.shear, config.shear),
                uniform(-config.shear, config.shear),
            ),
            translate: (
                uniform(0.5 - config.translate, 0.5 + config.translate),
                uniform(0.5 - config.translate, 0.5 + config.translate),
            ),
        };
        let hsv_gains = [config.hsv_h, config.hsv_s, config.hsv_v].map(|g| uniform(-1.0, 1.0) * g);
        let flip_ud = uniform(0.0, 1.0) < config.flipud;
        let flip_lr = uniform(0.0, 1.0) < config.fliplr;
        Ok(SampleDraws {
            mosaic,
            affine,
            hsv_gains,
            flip_ud,
            flip_lr,
        })
    }
}

/// The generator of sample `index` in epoch `epoch` of a run seeded with `seed`.
pub fn sample_generator(seed: u64, epoch: u64, index: u64) -> Generator {
    Generator::new(mix(&[seed, epoch, index, STREAM_SAMPLE]))
}

/// The generator that shuffles epoch `epoch` of a run seeded with `seed`.
pub fn shuffle_generator(seed: u64, epoch: u64) -> Generator {
    Generator::new(mix(&[seed, epoch, STREAM_SHUFFLE]))
}

const STREAM_SAMPLE: u64 = 0x5341_4d50_4c45; // "SAMPLE"
const STREAM_SHUFFLE: u64 = 0x0053_4855_4646_4C45; // "SHUFFLE"

/// One 64-bit key from several words (splitmix64 over each in turn), so nearby inputs give
/// unrelated Philox keys.
fn mix(words: &[u64]) -> u64 {
    words.iter().fold(0x9E37_79B9_7F4A_7C15, |h, &w| {
        let mut z = (h ^ w).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_ultralytics_ranges() {
        let cfg = AugmentConfig {
            imgsz: 65,
            ..Default::default()
        };
        for index in 0..500 {
            let d = SampleDraws::draw(
                &cfg,
                true,
                Partners::Any(7),
                &mut sample_generator(3, 1, index),
            )
            .unwrap();
            let m = d.mosaic.expect("mosaic probability 1");
            // s = 65: border -33, centre in [33, 97).
            assert!((33..97).contains(&m.center.0) && (33..97).contains(&m.center.1));
            assert!(m.others.iter().all(|&i| i < 7));
            assert!((0.5..1.5).contains(&d.affine.scale));
            let (tx, ty) = d.affine.translate;
            assert!((0.4..0.6).contains(&tx) && (0.4..0.6).contains(&ty));
            assert_eq!((d.affine.degrees, d.affine.shear), (0.0, (0.0, 0.0)));
            for (g, max) in d.hsv_gains.iter().zip([0.015, 0.7, 0.4]) {
                assert!(g.abs() <= max);
            }
            assert!(!d.flip_ud);
        }
    }

    #[test]
    fn partners_come_from_the_candidates() {
        let cfg = AugmentConfig::default();
        let candidates = [40, 7, 13];
        for index in 0..200 {
            let d = SampleDraws::draw(
                &cfg,
                true,
                Partners::Among(&candidates),
                &mut sample_generator(1, 0, index),
            )
            .unwrap();
            assert!(d
                .mosaic
                .unwrap()
                .others
                .iter()
                .all(|o| candidates.contains(o)));
        }
    }

    #[test]
    fn closed_mosaic_draws_no_mosaic() {
        let cfg = AugmentConfig::default();
        let d = SampleDraws::draw(
            &cfg,
            false,
            Partners::Any(10),
            &mut sample_generator(0, 0, 0),
        )
        .unwrap();
        assert_eq!(d.mosaic, None);
    }

    #[test]
    fn streams_differ_by_seed_epoch_and_index() {
        let draw = |s, e, i| {
            SampleDraws::draw(
                &AugmentConfig::default(),
                true,
                Partners::Any(100),
                &mut sample_generator(s, e, i),
            )
            .unwrap()
        };
        assert_eq!(draw(1, 2, 3), draw(1, 2, 3));
        assert_ne!(draw(1, 2, 3), draw(1, 2, 4));
        assert_ne!(draw(1, 2, 3), draw(1, 3, 3));
        assert_ne!(draw(1, 2, 3), draw(2, 2, 3));
    }

    #[test]
    fn flip_probability_is_about_one_half() {
        let cfg = AugmentConfig::default();
        let flips = (0..2000)
            .filter(|&i| {
                SampleDraws::draw(
                    &cfg,
                    true,
                    Partners::Any(10),
                    &mut sample_generator(9, 0, i),
                )
                .unwrap()
                .flip_lr
            })
            .count();
        assert!((900..1100).contains(&flips), "{flips} flips of 2000");
    }
}
