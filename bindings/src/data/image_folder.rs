//! `data::image_folder(dir, #{ ... })`: an ImageNet-layout folder as training and held-out
//! loaders, with the usual augmentation for training and the model's (or ImageNet's)
//! evaluation transform.

use super::loader::Loader;
use crate::convert::number;
use crate::error::{guard, runtime_error, RhaiResult};
use crate::nn::Model;
use rhai::{Dynamic, Map, INT};
use rusting_brain::data::mix::MixOptions;
use rusting_brain::data::{
    ImageFolder, ImageFolderBatches, ImageFolderOptions, ImageTransform, TrainAugment,
};
use rusting_brain::models::pretrained::as_image_model;
use rusting_brain::vision::color_jitter::ColorJitter;
use rusting_brain::vision::ImageProcessor;

crate::options! {
    struct ImageFolderOpts {
        imgsz: usize = 224,
        augment: bool = true,
        val_split: f64 = 0.0,
        seed: INT = 0,
        batch_size: usize = 32,
        workers: usize = 0,
        /// A model from vision::load, whose preprocessor replaces imgsz, mean and std.
        model: Dynamic,
        mixup: f64 = 0.0,
        cutmix: f64 = 0.0,
        min_scale: f64,
        flip: f64,
        color_jitter: Dynamic,
        mean: Dynamic,
        std: Dynamic,
    }
}

/// `color_jitter: 0.4` (brightness, contrast and saturation 0.4, no hue: timm's recipe) or
/// `[brightness, contrast, saturation]` or `[brightness, contrast, saturation, hue]`.
fn color_jitter(v: Option<&Dynamic>) -> RhaiResult<Option<ColorJitter>> {
    let Some(v) = v else {
        return Ok(None);
    };
    let what = "data::image_folder option color_jitter";
    let values: Vec<f64> = match v.read_lock::<rhai::Array>() {
        Some(arr) => arr
            .iter()
            .map(|x| number(x, what))
            .collect::<RhaiResult<_>>()?,
        None => {
            let s = number(v, what)?;
            vec![s, s, s]
        }
    };
    let (b, c, s, h) = match values.as_slice() {
        [b, c, s] => (*b, *c, *s, 0.0),
        [b, c, s, h] => (*b, *c, *s, *h),
        _ => {
            return Err(runtime_error(format!(
            "{what}: expected a number or [brightness, contrast, saturation(, hue)], got {} values",
            values.len()
        )))
        }
    };
    let jitter = guard(|| ColorJitter::new(b, c, s, h))?;
    Ok((b, c, s, h).ne(&(0.0, 0.0, 0.0, 0.0)).then_some(jitter))
}

/// torchvision's ImageNet evaluation transform at `imgsz`: the short side to imgsz·256/224
/// (bilinear), the centre imgsz x imgsz, ImageNet's mean and std (or the options' `mean` and
/// `std`: 0.5 and 0.5 give the [-1, 1] a diffusion model trains on).
fn imagenet_processor(
    imgsz: usize,
    mean: Option<&Dynamic>,
    std: Option<&Dynamic>,
) -> RhaiResult<ImageProcessor> {
    let resize = ((imgsz as f64) * 256.0 / 224.0).round() as u64;
    let triple = |key: &str, v: Option<&Dynamic>, default: [f64; 3]| -> RhaiResult<[f64; 3]> {
        let Some(v) = v else {
            return Ok(default);
        };
        let what = format!("data::image_folder option {key}");
        let values: Vec<f64> = match v.read_lock::<rhai::Array>() {
            Some(arr) => arr
                .iter()
                .map(|x| number(x, &what))
                .collect::<RhaiResult<_>>()?,
            None => vec![number(v, &what)?; 3],
        };
        <[f64; 3]>::try_from(values)
            .map_err(|v| runtime_error(format!("{what}: one number or three, got {}", v.len())))
    };
    let (mean, std) = (
        triple("mean", mean, [0.485, 0.456, 0.406])?,
        triple("std", std, [0.229, 0.224, 0.225])?,
    );
    guard(|| {
        ImageProcessor::from_json(&serde_json::json!({
            "size": {"shortest_edge": resize}, "resample": 2,
            "do_center_crop": true, "crop_size": {"height": imgsz, "width": imgsz},
            "image_mean": mean, "image_std": std
        }))
    })
}

pub fn image_folder(dir: &str, opts: Map) -> RhaiResult<Map> {
    let o = ImageFolderOpts::parse("data::image_folder", opts)?;
    let processor = match &o.model {
        Some(m) => {
            let model = m.clone().try_cast::<Model>().ok_or_else(|| {
                runtime_error("data::image_folder: model must be a model from vision::load")
            })?;
            let guard = model.lock();
            as_image_model(guard.as_ref())
                .and_then(|m| m.processor().cloned())
                .ok_or_else(|| {
                    runtime_error(format!(
                        "data::image_folder: {} has no preprocessor_config.json; give imgsz instead",
                        guard.title()
                    ))
                })?
        }
        None => imagenet_processor(o.imgsz, o.mean.as_ref(), o.std.as_ref())?,
    };
    let seed = o.seed as u64;
    let val_split = o.val_split;
    let folder = guard(|| ImageFolder::open(dir))?;
    let (mixup, cutmix) = (o.mixup, o.cutmix);
    let mix = (mixup > 0.0 || cutmix > 0.0).then_some(MixOptions {
        mixup_alpha: mixup,
        cutmix_alpha: cutmix,
        classes: folder.classes.len(),
    });
    let options = ImageFolderOptions {
        batch_size: o.batch_size,
        shuffle: true,
        drop_last: false,
        seed,
        workers: o.workers,
        mix,
    };
    let (train, val) = guard(|| folder.split(val_split, seed))?;
    let augment = o.augment;
    let augmenting = [
        ("min_scale", o.min_scale.is_some()),
        ("flip", o.flip.is_some()),
        ("color_jitter", o.color_jitter.is_some()),
    ];
    if let Some((k, _)) = augmenting.into_iter().find(|(_, given)| !augment && *given) {
        return Err(runtime_error(format!(
            "data::image_folder: {k} shapes the training augmentation, which augment: false turns off"
        )));
    }
    let train_transform = match augment {
        true => {
            let augment = TrainAugment {
                min_scale: o.min_scale.unwrap_or(0.08),
                flip: o.flip.unwrap_or(0.5),
                color_jitter: color_jitter(o.color_jitter.as_ref())?,
            };
            guard(|| ImageTransform::train(processor.clone(), augment))?
        }
        false => ImageTransform::Eval(processor.clone()),
    };
    let mut out = Map::new();
    let classes: rhai::Array = folder
        .classes
        .iter()
        .map(|c| Dynamic::from(c.clone()))
        .collect();
    out.insert("classes".into(), classes.into());
    out.insert(
        "train_size".into(),
        (train.samples.len() as rhai::INT).into(),
    );
    out.insert("val_size".into(), (val.samples.len() as rhai::INT).into());
    out.insert(
        "train".into(),
        Dynamic::from(Loader::new(guard(|| {
            ImageFolderBatches::new(train, train_transform, options.clone())
        })?)),
    );
    if !val.samples.is_empty() {
        let val_options = ImageFolderOptions {
            shuffle: false,
            mix: None,
            ..options
        };
        let eval = ImageTransform::Eval(processor);
        out.insert(
            "val".into(),
            Dynamic::from(Loader::new(guard(|| {
                ImageFolderBatches::new(val, eval, val_options)
            })?)),
        );
    }
    Ok(out)
}
