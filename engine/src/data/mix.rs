//! MixUp (Zhang et al. 2018) and CutMix (Yun et al. 2019) on a batch of images, as
//! torchvision's `transforms.v2.MixUp` and `CutMix` apply them: each image is paired with its
//! neighbour in the batch (the batch rolled by one), λ is drawn from Beta(α, α), and the labels
//! become class probabilities [B, classes] that `cross_entropy` takes.
//!
//! - MixUp: x = λ·x + (1 − λ)·x_rolled; labels mixed with the same λ.
//! - CutMix: a box of about (1 − λ) of the image, centred at a uniform point and clipped to the
//!   image, is copied from the rolled batch; λ becomes 1 − box area / image area.
//!
//! With both α > 0, each batch takes one of them with equal odds (torchvision's
//! `RandomChoice([CutMix, MixUp])` recipe).

use super::scaling::one_hot;
use crate::{no_grad, DType, Error, Generator, Result, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MixOptions {
    /// Beta(α, α) for MixUp; 0 turns it off.
    pub mixup_alpha: f64,
    /// Beta(α, α) for CutMix; 0 turns it off.
    pub cutmix_alpha: f64,
    pub classes: usize,
}

/// Which mix a batch took, and its λ (the share of each image's own label).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mixed {
    MixUp(f64),
    CutMix(f64),
}

/// Images [B, C, H, W] (float) and class ids [B] → mixed images and class probabilities
/// [B, classes] (F32, on the images' device).
pub fn mix_batch(
    x: &Tensor,
    y: &Tensor,
    opts: MixOptions,
    gen: &mut Generator,
) -> Result<(Tensor, Tensor, Mixed)> {
    let bad = |msg: String| Err(Error::invalid("mix", msg));
    if !(opts.mixup_alpha >= 0.0 && opts.cutmix_alpha >= 0.0) {
        return bad(format!(
            "alphas must be 0 (off) or positive, got mixup {} and cutmix {}",
            opts.mixup_alpha, opts.cutmix_alpha
        ));
    }
    if opts.mixup_alpha == 0.0 && opts.cutmix_alpha == 0.0 {
        return bad("neither mixup nor cutmix is on (give an alpha above 0)".into());
    }
    if x.rank() != 4 || !x.dtype().is_float() {
        return bad(format!(
            "expects float images [B, C, H, W], got {:?} {:?}",
            x.dtype(),
            x.shape()
        ));
    }
    if y.shape() != [x.shape()[0]] {
        return bad(format!(
            "expects one class id per image: images {:?}, labels {:?}",
            x.shape(),
            y.shape()
        ));
    }
    let labels = one_hot(y, opts.classes)?.to_dtype(DType::F32)?;
    let use_cutmix = match (opts.mixup_alpha > 0.0, opts.cutmix_alpha > 0.0) {
        (true, true) => gen.uniform(1)[0] < 0.5,
        (false, true) => true,
        _ => false,
    };
    let alpha = if use_cutmix {
        opts.cutmix_alpha
    } else {
        opts.mixup_alpha
    };
    let lam = beta(alpha, gen);
    let rolled = x.roll(1, 0)?;
    let (images, lam, mixed) = if use_cutmix {
        let (h, w) = (x.shape()[2], x.shape()[3]);
        let (y0, y1, x0, x1) = cut_box(h, w, lam, gen);
        let mut mask = vec![0f32; h * w];
        for row in y0..y1 {
            mask[row * w + x0..row * w + x1].fill(1.0);
        }
        let mask = Tensor::from_vec(mask, &[1, 1, h, w])?
            .to_device(x.device())?
            .to_dtype(x.dtype())?;
        let kept = x.mul(&mask.neg()?.add_scalar(1.0)?)?;
        let lam = 1.0 - ((y1 - y0) * (x1 - x0)) as f64 / (h * w) as f64;
        (kept.add(&rolled.mul(&mask)?)?, lam, Mixed::CutMix(lam))
    } else {
        let images = x.mul_scalar(lam)?.add(&rolled.mul_scalar(1.0 - lam)?)?;
        (images, lam, Mixed::MixUp(lam))
    };
    let soft = no_grad(|| {
        labels
            .mul_scalar(lam)?
            .add(&labels.roll(1, 0)?.mul_scalar(1.0 - lam)?)
    })?;
    Ok((images, soft.to_device(x.device())?, mixed))
}

/// The box CutMix copies: centre uniform over the image, half-sides sqrt(1 − λ)/2 of each side
/// (rounded down), clipped to the image. Rows y0..y1, columns x0..x1.
fn cut_box(h: usize, w: usize, lam: f64, gen: &mut Generator) -> (usize, usize, usize, usize) {
    let cy = gen.integers(0, h as i64, 1)[0] as usize;
    let cx = gen.integers(0, w as i64, 1)[0] as usize;
    let r = 0.5 * (1.0 - lam).sqrt();
    let (hh, hw) = ((r * h as f64) as usize, (r * w as f64) as usize);
    (
        cy.saturating_sub(hh),
        (cy + hh).min(h),
        cx.saturating_sub(hw),
        (cx + hw).min(w),
    )
}

/// A Beta(α, α) draw: G1 / (G1 + G2) for G1, G2 ~ Gamma(α, 1).
fn beta(alpha: f64, gen: &mut Generator) -> f64 {
    let (a, b) = (gamma(alpha, gen), gamma(alpha, gen));
    if a + b == 0.0 {
        return 0.5;
    }
    a / (a + b)
}

/// A Gamma(shape, 1) draw (Marsaglia and Tsang 2000; below shape 1, Gamma(shape + 1) · U^(1/shape)).
fn gamma(shape: f64, gen: &mut Generator) -> f64 {
    if shape < 1.0 {
        let u = gen.uniform(1)[0].max(f64::MIN_POSITIVE);
        return gamma(shape + 1.0, gen) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let z = gen.normal(1)[0];
        let v = (1.0 + c * z).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = gen.uniform(1)[0];
        if u.max(f64::MIN_POSITIVE).ln() < 0.5 * z * z + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> (Tensor, Tensor) {
        let x: Vec<f32> = (0..3 * 2 * 4 * 5).map(|i| i as f32).collect();
        let x = Tensor::from_vec(x, &[3, 2, 4, 5]).unwrap();
        (x, Tensor::from_vec(vec![0i64, 2, 1], &[3]).unwrap())
    }

    #[test]
    fn mixup_mixes_each_image_and_label_with_its_neighbour_by_lambda() {
        let (x, y) = batch();
        let opts = MixOptions {
            mixup_alpha: 0.4,
            cutmix_alpha: 0.0,
            classes: 3,
        };
        let (mx, my, mixed) = mix_batch(&x, &y, opts, &mut Generator::new(1)).unwrap();
        let Mixed::MixUp(lam) = mixed else {
            panic!("{mixed:?}")
        };
        assert!((0.0..=1.0).contains(&lam));
        let (xv, mv) = (x.to_vec_f32().unwrap(), mx.to_vec_f32().unwrap());
        let n = 40;
        // Image 1 is mixed with image 0 (the batch rolled by one).
        for i in 0..n {
            let want = lam as f32 * xv[n + i] + (1.0 - lam as f32) * xv[i];
            assert!((mv[n + i] - want).abs() < 1e-4);
        }
        let my = my.to_vec_f32().unwrap();
        // Row 1: class 2 with λ, and image 0's class 0 with 1 − λ.
        assert!((my[3 + 2] - lam as f32).abs() < 1e-6 && (my[3] - (1.0 - lam as f32)).abs() < 1e-6);
    }

    #[test]
    fn cutmix_pastes_a_box_and_weights_labels_by_its_area() {
        let (x, y) = batch();
        let opts = MixOptions {
            mixup_alpha: 0.0,
            cutmix_alpha: 1.0,
            classes: 3,
        };
        let (mx, my, mixed) = mix_batch(&x, &y, opts, &mut Generator::new(7)).unwrap();
        let Mixed::CutMix(lam) = mixed else {
            panic!("{mixed:?}")
        };
        let (xv, mv) = (x.to_vec_f32().unwrap(), mx.to_vec_f32().unwrap());
        // Every pixel of image 0 is its own or image 2's (rolled), and the share of its own is λ.
        let n = 40;
        let own = (0..n).filter(|&i| mv[i] == xv[i]).count();
        assert!((0..n).all(|i| mv[i] == xv[i] || mv[i] == xv[2 * n + i]));
        assert!(own < n, "no box was pasted");
        assert!((own as f64 / n as f64 - lam).abs() < 1e-9, "{own} vs {lam}");
        let my = my.to_vec_f32().unwrap();
        assert!((my[0] - lam as f32).abs() < 1e-6 && (my[1] - (1.0 - lam as f32)).abs() < 1e-6);
    }

    #[test]
    fn beta_draws_have_the_distribution_mean_and_spread() {
        let mut gen = Generator::new(3);
        for alpha in [0.2, 1.0, 4.0] {
            let draws: Vec<f64> = (0..4000).map(|_| beta(alpha, &mut gen)).collect();
            let mean = draws.iter().sum::<f64>() / draws.len() as f64;
            let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64;
            // Beta(α, α): mean 1/2, variance 1 / (4 (2α + 1)).
            assert!((mean - 0.5).abs() < 0.02, "alpha {alpha}: mean {mean}");
            let want = 1.0 / (4.0 * (2.0 * alpha + 1.0));
            assert!(
                (var - want).abs() < 0.1 * want,
                "alpha {alpha}: variance {var} vs {want}"
            );
        }
    }

    #[test]
    fn nothing_on_or_mismatched_labels_are_refused() {
        let (x, y) = batch();
        let off = MixOptions {
            mixup_alpha: 0.0,
            cutmix_alpha: 0.0,
            classes: 3,
        };
        let err = mix_batch(&x, &y, off, &mut Generator::new(0)).unwrap_err();
        assert!(err.to_string().contains("neither"), "{err}");
        let on = MixOptions {
            mixup_alpha: 1.0,
            ..off
        };
        let short = Tensor::from_vec(vec![0i64, 1], &[2]).unwrap();
        assert!(mix_batch(&x, &short, on, &mut Generator::new(0)).is_err());
    }
}
