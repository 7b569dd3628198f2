//! Parity with ultralytics 8.4.190 and opencv-python 5.0, from the fixtures that
//! tests/fixtures/yolo/augment/make_augment_fixture.py records by running ultralytics' own
//! transforms and replaying its draws here.
//!
//! Measured (this code against the fixtures): the mosaic canvas, the warp, the HSV round trip
//! match exactly (0 levels of difference) and boxes to within 1e-5 px, so pixels are asserted
//! equal and boxes within 0.01 px.

use super::affine::affine_matrix;
use super::hsv::{hsv_to_rgb, rgb_to_hsv};
use super::pipeline::finish;
use super::*;
use crate::data::yolo::{load_train_image, YoloDataset};
use crate::vision::boxes::Box4;
use crate::vision::image::read_rgb;
use image::RgbImage;
use serde_json::Value;
use std::path::PathBuf;

/// The largest box difference accepted, in pixels of the 64-pixel training image.
const BOX_TOL_PX: f64 = 0.01;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/yolo/augment")
}

fn json(name: &str) -> Value {
    let text = std::fs::read_to_string(dir().join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn png(name: &str) -> RgbImage {
    read_rgb(dir().join(name)).unwrap()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn boxes(v: &Value) -> Vec<Box4> {
    let rows = v.as_array().unwrap();
    rows.iter()
        .map(|r| {
            let r = f64s(r);
            [r[0] as f32, r[1] as f32, r[2] as f32, r[3] as f32]
        })
        .collect()
}

fn classes(v: &Value) -> Vec<usize> {
    f64s(v).into_iter().map(|c| c as usize).collect()
}

/// The draws ultralytics made for one recorded sample.
fn draws(s: &Value) -> SampleDraws {
    let mosaic = s.get("mosaic_center").map(|c| {
        let c = f64s(c);
        let o = f64s(&s["mosaic_others"]);
        MosaicDraw {
            center: (c[0] as usize, c[1] as usize),
            others: [o[0] as usize, o[1] as usize, o[2] as usize],
        }
    });
    let a = &s["affine"];
    let (shear, translate) = (f64s(&a["shear"]), f64s(&a["translate"]));
    let g = f64s(&s["hsv_gains"]);
    SampleDraws {
        mosaic,
        affine: AffineDraw {
            degrees: a["degrees"].as_f64().unwrap(),
            scale: a["scale"].as_f64().unwrap(),
            shear: (shear[0], shear[1]),
            translate: (translate[0], translate[1]),
        },
        hsv_gains: [g[0], g[1], g[2]],
        flip_ud: s["flip_ud"].as_bool().unwrap(),
        flip_lr: s["flip_lr"].as_bool().unwrap(),
    }
}

/// The fixture's images loaded as the training loader loads them, in dataset order.
fn loaded_images(imgsz: usize) -> Vec<TrainImage> {
    let ds = YoloDataset::from_paths(&[dir().join("images")], vec!["a".into(); 3]).unwrap();
    let want: Vec<String> = json("augment.json")["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let got: Vec<String> = ds
        .images
        .iter()
        .map(|e| format!("images/{}", e.path.file_name().unwrap().to_string_lossy()))
        .collect();
    assert_eq!(got, want, "dataset order differs from ultralytics'");
    ds.images
        .iter()
        .map(|e| load_train_image(e, imgsz).unwrap())
        .collect()
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01B3)
    })
}

/// Mean and max absolute difference of two same-sized images, in levels.
fn pixel_diff(a: &RgbImage, b: &RgbImage) -> (f64, u8) {
    assert_eq!(a.dimensions(), b.dimensions());
    let diffs: Vec<u8> = a
        .as_raw()
        .iter()
        .zip(b.as_raw())
        .map(|(x, y)| x.abs_diff(*y))
        .collect();
    let mean = diffs.iter().map(|&d| d as f64).sum::<f64>() / diffs.len() as f64;
    (mean, diffs.into_iter().max().unwrap_or(0))
}

fn max_box_diff(a: &[Box4], b: &[Box4], scale: f64) -> f64 {
    assert_eq!(a.len(), b.len(), "box counts differ: {a:?} vs {b:?}");
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            x.iter()
                .zip(y)
                .map(|(p, q)| (*p as f64 - *q as f64).abs() * scale)
        })
        .fold(0.0, f64::max)
}

/// Each recorded sample with its position in the fixture.
fn samples() -> (usize, Vec<Value>) {
    let f = json("augment.json");
    let imgsz = f["imgsz"].as_u64().unwrap() as usize;
    (imgsz, f["samples"].as_array().unwrap().clone())
}

/// The sample before the affine: our mosaic, or the loaded image alone.
fn placed(s: &Value, images: &[TrainImage], imgsz: usize) -> Labeled {
    let index = s["index"].as_u64().unwrap() as usize;
    match draws(s).mosaic {
        Some(m) => {
            let o = m.others.map(|i| &images[i]);
            mosaic4([&images[index], o[0], o[1], o[2]], imgsz, &m).unwrap()
        }
        None => images[index].to_labeled(),
    }
}

#[test]
fn warp_matches_cv2_bit_for_bit() {
    let f = json("warp.json");
    let src = png(f["src"].as_str().unwrap());
    for case in f["cases"].as_array().unwrap() {
        let m = f64s(&case["matrix"]);
        let size = f64s(&case["size"]);
        let got = warp_affine(
            &src,
            &[m[0], m[1], m[2], m[3], m[4], m[5]],
            size[0] as usize,
            size[1] as usize,
            114,
        );
        let want = png(case["image"].as_str().unwrap());
        let (mean, max) = pixel_diff(&got, &want);
        println!("warp {}: mean |d| {mean:.4}, max {max}", case["image"]);
        assert!(max == 0, "{}: max difference {max}", case["image"]);
    }
}

#[test]
fn hsv_conversions_match_cv2() {
    let (rgb, hsv) = (png("hsv_rgb.png"), png("hsv_rgb_to_hsv.png"));
    for (p, want) in rgb.pixels().zip(hsv.pixels()) {
        assert_eq!(rgb_to_hsv(p.0), want.0, "RGB {:?}", p.0);
    }
    let (hsv, rgb) = (png("hsv_in.png"), png("hsv_in_to_rgb.png"));
    for (p, want) in hsv.pixels().zip(rgb.pixels()) {
        assert_eq!(hsv_to_rgb(p.0), want.0, "HSV {:?}", p.0);
    }
}

#[test]
fn mosaic_matches_ultralytics() {
    let (imgsz, samples) = samples();
    let images = loaded_images(imgsz);
    let mut checked = 0;
    for s in samples.iter().filter(|s| s.get("mosaic_center").is_some()) {
        let got = placed(s, &images, imgsz);
        let want_hash: u64 = s["mosaic_fnv1a"].as_str().unwrap().parse().unwrap();
        assert_eq!(
            fnv1a64(got.image.as_raw()),
            want_hash,
            "sample {}: canvas",
            s["k"]
        );
        assert_eq!(
            got.classes,
            classes(&s["mosaic_classes"]),
            "sample {}",
            s["k"]
        );
        let d = max_box_diff(&got.boxes, &boxes(&s["mosaic_boxes"]), 1.0);
        assert!(d <= BOX_TOL_PX, "sample {}: boxes differ by {d} px", s["k"]);
        checked += 1;
    }
    assert!(checked >= 6, "only {checked} mosaic samples");
}

#[test]
fn affine_matrix_matches_ultralytics() {
    let (imgsz, samples) = samples();
    let images = loaded_images(imgsz);
    for s in &samples {
        let input = placed(s, &images, imgsz);
        let (w, h) = (input.image.width() as usize, input.image.height() as usize);
        let m = affine_matrix(&draws(s).affine, w, h, imgsz, imgsz);
        let want: Vec<f64> = s["matrix"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(f64s)
            .collect();
        let got: Vec<f64> = m.iter().flatten().map(|&v| v as f64).collect();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "sample {}: {got:?} vs {want:?}",
                s["k"]
            );
        }
    }
}

#[test]
fn affine_matches_ultralytics() {
    let (imgsz, samples) = samples();
    let images = loaded_images(imgsz);
    let (mut worst_mean, mut worst_max, mut worst_box) = (0.0f64, 0u8, 0.0f64);
    for s in &samples {
        let got = random_affine(&placed(s, &images, imgsz), &draws(s).affine, imgsz, imgsz);
        let (mean, max) = pixel_diff(&got.image, &png(s["affine_image"].as_str().unwrap()));
        assert_eq!(
            got.classes,
            classes(&s["affine_classes"]),
            "sample {}",
            s["k"]
        );
        let d = max_box_diff(&got.boxes, &boxes(&s["affine_boxes"]), 1.0);
        (worst_mean, worst_max, worst_box) =
            (worst_mean.max(mean), worst_max.max(max), worst_box.max(d));
    }
    println!("affine: worst mean |d| {worst_mean:.4}, max {worst_max}, boxes {worst_box:.2e} px");
    assert!(worst_max == 0, "pixels differ by up to {worst_max}");
    assert!(worst_box <= BOX_TOL_PX, "boxes differ by {worst_box} px");
}

#[test]
fn hsv_and_flips_match_ultralytics() {
    // From ultralytics' own affine output, so only HSV, flips and Format are compared.
    let (_, samples) = samples();
    for s in &samples {
        let d = draws(s);
        let mut image = png(s["affine_image"].as_str().unwrap());
        apply_hsv(&mut image, d.hsv_gains);
        let labeled = Labeled {
            image,
            classes: classes(&s["affine_classes"]),
            boxes: boxes(&s["affine_boxes"]),
        };
        let out = finish(labeled, d.flip_ud, d.flip_lr);
        let (mean, max) = pixel_diff(&out.image, &png(s["final_image"].as_str().unwrap()));
        assert!(max == 0, "sample {}: mean {mean}, max {max}", s["k"]);
        let bd = max_box_diff(&out.boxes, &boxes(&s["final_boxes"]), 64.0);
        assert!(
            bd <= BOX_TOL_PX,
            "sample {}: boxes differ by {bd} px",
            s["k"]
        );
    }
}

#[test]
fn pipeline_matches_ultralytics() {
    let (imgsz, samples) = samples();
    let images = loaded_images(imgsz);
    let (mut worst_mean, mut worst_max, mut worst_box) = (0.0f64, 0u8, 0.0f64);
    for s in &samples {
        let d = draws(s);
        let index = s["index"].as_u64().unwrap() as usize;
        let others: Vec<&TrainImage> = d
            .mosaic
            .map_or(vec![], |m| m.others.map(|i| &images[i]).to_vec());
        let out = augment(&images[index], &others, &d, imgsz).unwrap();
        let (mean, max) = pixel_diff(&out.image, &png(s["final_image"].as_str().unwrap()));
        assert_eq!(
            out.classes,
            classes(&s["final_classes"]),
            "sample {}",
            s["k"]
        );
        let bd = max_box_diff(&out.boxes, &boxes(&s["final_boxes"]), imgsz as f64);
        (worst_mean, worst_max, worst_box) =
            (worst_mean.max(mean), worst_max.max(max), worst_box.max(bd));
    }
    println!("pipeline: worst mean |d| {worst_mean:.4}, max {worst_max}, boxes {worst_box:.2e} px");
    assert!(worst_max == 0, "pixels differ by up to {worst_max}");
    assert!(worst_box <= BOX_TOL_PX, "boxes differ by {worst_box} px");
    // The fixture covers the closed-mosaic path, rotation and shear, and flips.
    assert!(samples
        .iter()
        .any(|s| s["closed_mosaic"].as_bool().unwrap()));
    assert!(samples
        .iter()
        .any(|s| s["affine"]["degrees"].as_f64().unwrap() != 0.0));
    assert!(samples.iter().any(|s| s["flip_lr"].as_bool().unwrap()));
}
